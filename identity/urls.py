"""Sign-in routes, included at the root by portal/urls.py."""

from django.urls import path

from identity import views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.logout, name="logout"),
    path(
        "oidc/authenticate/", views.OIDCAuthenticateView.as_view(), name="oidc_authentication_init"
    ),
    path("oidc/callback/", views.OIDCCallbackView.as_view(), name="oidc_authentication_callback"),
]
