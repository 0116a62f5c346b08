"""The login page (local form and/or "Sign in with <provider>"), the OpenID Connect redirect
and callback (mozilla-django-oidc's views, with endpoints from discovery and failures shown
on the login page saying what failed), and logout (the provider's too, where it offers
RP-initiated logout)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.views.decorators.http import require_POST
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from identity import oidc
from identity.oidc import IdentityError

# An OAuth error code is a short token (RFC 6749 4.1.2.1); anything else is not shown.
_ERROR_CODE = re.compile(r"^[a-z_]{1,40}$")


def login_context() -> dict[str, Any]:
    return {
        "oidc_enabled": settings.OIDC_ENABLED,
        "provider_name": oidc.provider_name(),
        "password_form": settings.LOCAL_LOGIN_ENABLED or settings.LDAP_ENABLED,
        "ldap_enabled": settings.LDAP_ENABLED,
    }


class LoginView(auth_views.LoginView):
    """Django's login view (its ``next`` check keeps redirects within the portal), with the
    provider's button and the local form only where enabled."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), **login_context()}


def sign_in_failed(request: HttpRequest, message: str, *, status: int) -> HttpResponse:
    """The login page again, saying what failed, with the local form where it is on."""
    context = {**login_context(), "sso_error": message, "next": ""}
    return render(request, "registration/login.html", context, status=status)


class OIDCAuthenticateView(OIDCAuthenticationRequestView):
    """``GET /oidc/authenticate/?next=/path``: to the provider's authorization endpoint with
    state, nonce and a PKCE challenge kept in the session."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # endpoints are read per request
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("Single sign-on is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc.endpoint("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except IdentityError as exc:
            return sign_in_failed(request, exc.message, status=exc.status_code)
        return super().get(request)


class OIDCCallbackView(OIDCAuthenticationCallbackView):
    """``GET /oidc/callback/?code=...&state=...``: the code exchanged for tokens (with the PKCE
    verifier), the ID token checked, the user signed in with the roles her groups give."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("Single sign-on is not configured.")
        try:
            return super().get(request)
        except IdentityError as exc:
            return sign_in_failed(request, exc.message, status=exc.status_code)
        except SuspiciousOperation:
            return sign_in_failed(
                request,
                f"This answer from {oidc.provider_name()} does not belong to a sign-in started "
                "here, or was already used: sign in again.",
                status=400,
            )

    def login_failure(self) -> HttpResponse:
        name = oidc.provider_name()
        error = self.request.GET.get("error", "")
        if error:
            shown = error if _ERROR_CODE.match(error) else "an unknown error"
            message = f"{name} refused the sign-in ({shown})."
        elif "oidc_states" not in self.request.session:
            message = (
                f"This sign-in through {name} was not started here or has expired: sign in again."
            )
        else:
            message = f"Sign-in through {name} failed: your account here is disabled."
        return sign_in_failed(self.request, message, status=400 if error else 403)


@require_POST
def logout(request: HttpRequest) -> HttpResponse:
    """End the portal session; after a single sign-on, the provider's too where its discovery
    document has an ``end_session_endpoint`` (OpenID Connect RP-Initiated Logout)."""
    id_token = request.session.get("oidc_id_token")
    auth.logout(request)
    target = resolve_url(settings.LOGOUT_REDIRECT_URL)
    if settings.OIDC_ENABLED and id_token:
        try:
            end_session = oidc.endpoint("OIDC_OP_LOGOUT_ENDPOINT", required=False)
        except IdentityError:
            end_session = ""  # the provider is down: the portal's session is ended all the same
        if end_session:
            query = urlencode(
                {
                    "id_token_hint": id_token,
                    "client_id": settings.OIDC_RP_CLIENT_ID,
                    "post_logout_redirect_uri": request.build_absolute_uri(reverse("login")),
                }
            )
            return HttpResponseRedirect(f"{end_session}?{query}")
    return HttpResponseRedirect(target)
