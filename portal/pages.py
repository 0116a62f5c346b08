"""The portal's HTML pages."""

from django.urls import path

from portal import views

app_name = "portal"
urlpatterns = [
    path("", views.home, name="home"),
    path("tenants/<str:slug>/", views.tenant_detail, name="tenant-detail"),
    path("console/", views.admin_console, name="console"),
]
