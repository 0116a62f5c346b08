"""The alert pages. Included by ``portal/pages.py`` in the portal's URL namespace."""

from django.urls import path

from alerts import views

urlpatterns = [
    path("alerts/", views.alert_list, name="alert-list"),
    path("alerts/<int:pk>/", views.alert_detail, name="alert-detail"),
    path("alerts/<int:pk>/acknowledge/", views.alert_acknowledge, name="alert-acknowledge"),
    path("alerts/<int:pk>/reactivate/", views.alert_reactivate, name="alert-reactivate"),
]
