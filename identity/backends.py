"""Authentication backends: local accounts (behind ``LOCAL_LOGIN_ENABLED``) and OpenID Connect
(mozilla-django-oidc); LDAP (django-auth-ldap) is ``identity.directory``, imported only where
LDAP is configured, since python-ldap is an optional extra. The LDAP and OIDC backends bring
the user's group-made roles in line with the groups the directory or provider sent
(``services.identity_groups_apply``) at each sign-in.

django-axes' backend comes first in ``AUTHENTICATION_BACKENDS``, so its lockout applies to the
local and the LDAP password alike (both arrive through the same login form)."""

from __future__ import annotations

import logging
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from identity import oidc
from identity.choices import IdentitySource
from identity.oidc import IdentityError, ProviderUnreachable
from identity.services import identity_groups_apply
from tenants.models import User

logger = logging.getLogger(__name__)

CLOCK_SKEW_SECONDS = 30  # leeway for exp / iat / nbf between the provider's clock and ours
USERNAME_MAX = 150


class LocalBackend(ModelBackend):
    """Django's own password check, refused while the admin has turned the local form off."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> User | None:
        if not settings.LOCAL_LOGIN_ENABLED:
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        return user if isinstance(user, User) else None


def _claim_groups(value: Any) -> list[str]:
    """A groups claim is a list of names (Keycloak, Dex, Entra ID) or, rarely, one string."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [g for g in value if isinstance(g, str)]
    return []


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's authorization code flow (PKCE and nonce from its views), with the
    endpoints from the issuer's discovery document (read lazily: loading a signed-in user's
    session must not need the provider) and a stricter ID token check: RS256 signature
    against the provider's JWKS, ``exp``, ``iss``, ``aud`` and ``nonce``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The base class reads the endpoints here; they are properties below instead.
        self.UserModel = User
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return oidc.endpoint("OIDC_OP_TOKEN_ENDPOINT")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return oidc.endpoint("OIDC_OP_USER_ENDPOINT")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return oidc.endpoint("OIDC_OP_JWKS_ENDPOINT")

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        try:
            return super().authenticate(request, **kwargs)
        except requests.RequestException as exc:
            raise ProviderUnreachable(
                f"{oidc.provider_name()} did not answer while finishing the sign-in "
                f"({type(exc).__name__})."
            ) from exc

    def signing_keys(self, token: str, header: dict[str, Any]) -> list[jwt.PyJWK]:
        """The provider's keys (its JWKS) that may have signed ``token``: the one its ``kid``
        names, or, for a token without ``kid`` (some providers leave it out when they have a
        single key), every signing key of the algorithm's type."""
        name = oidc.provider_name()
        response = requests.get(
            self.OIDC_OP_JWKS_ENDPOINT,
            timeout=settings.OIDC_TIMEOUT,
            verify=settings.OIDC_VERIFY_SSL,
        )
        response.raise_for_status()
        try:
            published = response.json()["keys"]
        except (ValueError, KeyError, TypeError) as exc:
            raise IdentityError(f"{name}'s signing keys (JWKS) cannot be read.") from exc
        kid = header.get("kid")
        kty = "EC" if self.OIDC_RP_SIGN_ALGO.startswith("ES") else "RSA"
        keys = []
        for item in published if isinstance(published, list) else []:
            if not isinstance(item, dict) or item.get("use", "sig") != "sig":
                continue
            if kid is not None and item.get("kid") != kid:
                continue
            if item.get("kty") != kty or item.get("alg", self.OIDC_RP_SIGN_ALGO) != header["alg"]:
                continue
            try:
                keys.append(jwt.PyJWK(item, algorithm=self.OIDC_RP_SIGN_ALGO))
            except jwt.PyJWTError:
                continue
        if not keys:
            raise IdentityError(f"The ID token is signed with a key {name} does not publish.")
        return keys

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        name = oidc.provider_name()
        if not isinstance(token, str) or not token:
            raise IdentityError(f"{name} sent no ID token.")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise IdentityError(f"{name}'s ID token is not a signed token.") from exc
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise IdentityError(
                f"{name}'s ID token is signed with {header.get('alg')!r}, not "
                f"{self.OIDC_RP_SIGN_ALGO} (OIDC_SIGN_ALGO)."
            )
        keys = self.signing_keys(token, header)
        payload: dict[str, Any] | None = None
        for index, key in enumerate(keys):
            try:
                payload = jwt.decode(
                    token,
                    key,
                    algorithms=[self.OIDC_RP_SIGN_ALGO],
                    audience=self.OIDC_RP_CLIENT_ID,
                    issuer=oidc.metadata().get("issuer", settings.OIDC_ISSUER),
                    leeway=CLOCK_SKEW_SECONDS,
                    options={"require": ["exp", "iat", "iss", "aud", "sub"]},
                )
                break
            except jwt.InvalidSignatureError as exc:
                if index + 1 < len(keys):
                    continue  # a token without kid: the next key may be the one
                raise IdentityError(
                    f"{name}'s ID token failed its signature check: it was not signed by "
                    "the provider's key."
                ) from exc
            except jwt.ExpiredSignatureError as exc:
                raise IdentityError(f"{name}'s ID token has expired: sign in again.") from exc
            except jwt.InvalidAudienceError as exc:
                raise IdentityError(
                    f"{name}'s ID token was issued for another client than OIDC_CLIENT_ID."
                ) from exc
            except jwt.InvalidIssuerError as exc:
                raise IdentityError(f"{name}'s ID token names another issuer.") from exc
            except jwt.PyJWTError as exc:
                raise IdentityError(f"{name}'s ID token was refused: {exc}.") from exc
        assert payload is not None  # every path above returns a payload or raises
        nonce = kwargs.get("nonce")
        if not nonce or payload.get("nonce") != nonce:
            raise IdentityError(
                f"{name}'s ID token does not carry this sign-in's nonce (a replayed or "
                "foreign token): start the sign-in again."
            )
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The userinfo endpoint's claims over the ID token's (groups may be in either)."""
        userinfo = super().get_userinfo(access_token, id_token, payload)
        return {**payload, **(userinfo if isinstance(userinfo, dict) else {})}

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        name = oidc.provider_name()
        claims = self.get_userinfo(access_token, id_token, payload)
        username = claims.get(settings.OIDC_USERNAME_CLAIM)
        if not isinstance(username, str) or not username.strip():
            raise IdentityError(
                f"{name} sent no {settings.OIDC_USERNAME_CLAIM!r} claim to name you by "
                "(OIDC_USERNAME_CLAIM): ask a platform admin."
            )
        username = username.strip()
        if len(username) > USERNAME_MAX:
            raise IdentityError(
                f"The username {name} sent is longer than {USERNAME_MAX} characters."
            )
        email = claims.get(settings.OIDC_EMAIL_CLAIM)
        email = email if isinstance(email, str) else ""
        user = User.objects.filter(username=username).first()
        if user is None:
            user = User(username=username, email=email)
            user.set_unusable_password()
            user.save()
        elif email and user.email != email:
            user.email = email
            user.save(update_fields=["email"])
        if not user.is_active:
            return None
        groups = _claim_groups(claims.get(settings.OIDC_GROUPS_CLAIM))
        identity_groups_apply(user=user, groups=groups, provider=IdentitySource.OIDC)
        return user
