"""The inbox pages (a user's notifications). Included by ``portal/pages.py`` in the portal's
URL namespace."""

from django.urls import path

from tenants import views

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/read/", views.inbox_mark_all_read, name="inbox-read-all"),
    path("inbox/<int:pk>/read/", views.inbox_mark_read, name="inbox-read"),
]
