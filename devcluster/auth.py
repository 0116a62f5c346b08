"""Authentication of the stand-in: who a request comes from.

- the static token: ``devcluster-admin`` in ``system:masters`` (allowed everything);
- tokens issued for any user (``POST /_devcluster/tokens``, ``Handle.token_for``);
- ServiceAccount tokens (TokenRequest: ``POST .../serviceaccounts/NAME/token``), valid while the
  ServiceAccount (with the same uid) exists and until they expire;
- over plain http without credentials (kubectl and client-go never send a token over http), the
  anonymous user of the old insecure port, allowed everything (``unrestricted``);
- then impersonation (``Impersonate-User`` / ``-Group`` / ``-Uid`` / ``-Extra-*`` headers),
  checked against RBAC's ``impersonate`` verb as the API server's impersonation filter does.

Issued tokens are kept in ``tokens.json`` in the state directory when there is one.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("devcluster")

AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
MASTERS = "system:masters"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
# What a token bound to a Pod adds to its user's extra (k8s.io/apiserver serviceaccount/util.go;
# the node's since Kubernetes 1.30, ServiceAccountTokenPodNodeInfo).
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"
NODE_UID = "authentication.kubernetes.io/node-uid"
DEFAULT_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class UserInfo:
    """An authenticated (or impersonated) identity, as ``user.Info`` upstream."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The anonymous user of plain http, playing the old insecure port: allowed everything.
    unrestricted: bool = False

    def as_json(self) -> dict[str, Any]:
        """``UserInfo`` of authentication.k8s.io/v1 (TokenReview, SelfSubjectReview, CEL)."""
        info: dict[str, Any] = {"username": self.name}
        if self.uid:
            info["uid"] = self.uid
        info["groups"] = list(self.groups)
        if self.extra:
            info["extra"] = {key: list(values) for key, values in self.extra}
        return info


ADMIN = UserInfo("devcluster-admin", (MASTERS, AUTHENTICATED))
INSECURE_ANONYMOUS = UserInfo("system:anonymous", (UNAUTHENTICATED,), unrestricted=True)


def service_account_username(namespace: str, name: str) -> str:
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICE_ACCOUNTS_GROUP, f"{SERVICE_ACCOUNTS_GROUP}:{namespace}")


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of ``system:serviceaccount:NS:NAME``, else None."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    parts = username[len(SERVICE_ACCOUNT_PREFIX) :].split(":")
    if len(parts) != 2 or not all(parts):
        return None
    return parts[0], parts[1]


def with_authenticated(groups: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The groups, plus ``system:authenticated`` as every authenticated user has it."""
    result = list(dict.fromkeys(groups))
    if AUTHENTICATED not in result:
        result.append(AUTHENTICATED)
    return tuple(result)


@dataclass
class IssuedToken:
    user: UserInfo
    expires_at: float | None = None  # epoch seconds
    # (namespace, name, uid) of the ServiceAccount a TokenRequest was made for.
    service_account: tuple[str, str, str] | None = None
    audiences: tuple[str, ...] = ()
    # (kind, name, uid) of the object a TokenRequest bound the token to (a Pod, a Secret) and
    # (name, uid) of the Node its Pod ran on: the token dies with either.
    bound: tuple[str, str, str] | None = None
    node: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user.as_json(),
            "expiresAt": self.expires_at,
            "serviceAccount": list(self.service_account) if self.service_account else None,
            "audiences": list(self.audiences),
            "bound": list(self.bound) if self.bound else None,
            "node": list(self.node) if self.node else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> IssuedToken:
        info = data["user"]
        user = UserInfo(
            name=info["username"],
            groups=tuple(info.get("groups") or ()),
            uid=info.get("uid", ""),
            extra=tuple((k, tuple(v)) for k, v in (info.get("extra") or {}).items()),
        )
        account = data.get("serviceAccount")
        bound = data.get("bound")
        node = data.get("node")
        return cls(
            user,
            data.get("expiresAt"),
            (str(account[0]), str(account[1]), str(account[2])) if account else None,
            tuple(data.get("audiences") or ()),
            (str(bound[0]), str(bound[1]), str(bound[2])) if bound else None,
            (str(node[0]), str(node[1])) if node else None,
        )


# ``uid_of(type_key, namespace, name)``: the uid of the stored object, None when there is none.
UidOf = Callable[[str, str, str], str | None]
BOUND_KINDS = {"Pod": "pods", "Secret": "secrets"}


@dataclass
class Tokens:
    """Every token the stand-in accepts besides its static one."""

    path: Path | None = None
    now: Callable[[], float] = time.time  # tests may move the clock to expire tokens
    issued: dict[str, IssuedToken] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.path is not None and self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.issued = {t: IssuedToken.from_json(e) for t, e in data.items()}
            except (ValueError, KeyError, TypeError):
                logger.warning("devcluster: ignoring unreadable %s", self.path)

    def _save(self) -> None:
        if self.path is None:
            return
        temporary = self.path.with_name(self.path.name + ".tmp")
        data = {token: entry.to_json() for token, entry in self.issued.items()}
        temporary.write_text(json.dumps(data, indent=1), encoding="utf-8")
        temporary.chmod(0o600)
        os.replace(temporary, self.path)

    def issue_user(
        self,
        name: str,
        groups: list[str] | tuple[str, ...] = (),
        *,
        uid: str = "",
        extra: Mapping[str, list[str]] | None = None,
    ) -> str:
        """A token for ``name`` (with ``system:authenticated`` added to ``groups``)."""
        if not name:
            raise ValueError("a user name is required")
        user = UserInfo(
            name,
            with_authenticated(groups),
            uid,
            tuple((k, tuple(v)) for k, v in sorted((extra or {}).items())),
        )
        token = "dc-user-" + secrets.token_urlsafe(24)
        self.issued[token] = IssuedToken(user)
        self._save()
        return token

    def issue_service_account(
        self,
        namespace: str,
        name: str,
        account_uid: str,
        expiration_seconds: int,
        audiences: list[str] | None = None,
        *,
        bound: tuple[str, str, str] | None = None,
        node: tuple[str, str] | None = None,
    ) -> tuple[str, float]:
        """A token for the ServiceAccount, valid ``expiration_seconds`` from now; bound to an
        object (``bound``: kind, name, uid) and, for a Pod, the Node it runs on (``node``: name,
        uid), named in its user's extra as the API server names them."""
        expires_at = self.now() + expiration_seconds
        extra: dict[str, tuple[str, ...]] = {CREDENTIAL_ID: (f"JTI={uuid.uuid4()}",)}
        if bound is not None and bound[0] == "Pod":
            extra[POD_NAME], extra[POD_UID] = (bound[1],), (bound[2],)
        if node is not None:
            extra[NODE_NAME], extra[NODE_UID] = (node[0],), (node[1],)
        user = UserInfo(
            service_account_username(namespace, name),
            (*service_account_groups(namespace), AUTHENTICATED),
            account_uid,
            tuple(sorted(extra.items())),
        )
        token = "dc-sa-" + secrets.token_urlsafe(32)
        self.issued[token] = IssuedToken(
            user,
            expires_at,
            (namespace, name, account_uid),
            tuple(audiences or (DEFAULT_AUDIENCE,)),
            bound,
            node,
        )
        self._save()
        return token, expires_at

    def audiences(self, token: str) -> list[str]:
        entry = self.issued.get(token)
        return list(entry.audiences) if entry is not None else []

    def lookup(self, token: str, uid_of: UidOf) -> UserInfo | None:
        """The user of an issued token still valid, else None (``invalid``)."""
        return None if self.invalid(token, uid_of) else self.issued[token].user

    def invalid(self, token: str, uid_of: UidOf) -> str:
        """Why an issued token is no longer valid ("" when it is): unknown, expired, or, for
        a ServiceAccount token, its ServiceAccount, bound object or Node gone or replaced (not
        the uid it was issued for), as the API server's service account authenticator says."""
        entry = self.issued.get(token)
        if entry is None:
            return "invalid bearer token"
        if entry.expires_at is not None and self.now() >= entry.expires_at:
            return "service account token has expired"
        if entry.service_account is not None:
            namespace, name, uid = entry.service_account
            have = uid_of("serviceaccounts", namespace, name)
            if have is None:
                return f"service account {namespace}/{name} has been deleted"
            if have != uid:
                return f"service account UID ({have}) does not match claim ({uid})"
        if entry.bound is not None and entry.service_account is not None:
            kind, bound_name, bound_uid = entry.bound
            have = uid_of(BOUND_KINDS.get(kind, kind.lower() + "s"), entry.service_account[0],
                          bound_name)  # fmt: skip
            if have is None:
                return "service account token has been invalidated"
            if have != bound_uid:
                return f"{kind.lower()} UID ({have}) does not match claim ({bound_uid})"
        if entry.node is not None:
            node_name, node_uid = entry.node
            have = uid_of("nodes", "", node_name)
            if have is None:
                return "service account token has been invalidated"
            if have != node_uid:
                return f"node UID ({have}) does not match claim ({node_uid})"
        return ""


@dataclass(frozen=True)
class ImpersonationRequest:
    """One thing a requester asks to act as, checked with the ``impersonate`` verb."""

    resource: str  # users, groups, serviceaccounts, uids, userextras
    name: str
    namespace: str = ""
    subresource: str = ""  # the extra's key for userextras


class ImpersonationError(Exception):
    """A malformed set of impersonation headers (the API server answers 500)."""


def impersonation(headers: Any) -> tuple[UserInfo, list[ImpersonationRequest]] | None:
    """The identity the ``Impersonate-*`` headers ask for, and what must be authorized for it;
    None without such headers. Groups are completed as the API server does (the service
    account groups for ``system:serviceaccount:NS:NAME`` when no group is given;
    ``system:authenticated`` unless ``system:authenticated`` or ``system:unauthenticated`` is
    asked for)."""
    username = headers.get("Impersonate-User", "")
    groups = [g for g in headers.getall("Impersonate-Group", []) if g]
    uid = headers.get("Impersonate-Uid", "")
    prefix = "impersonate-extra-"
    extra: dict[str, list[str]] = {}
    for key, value in headers.items():
        if key.lower().startswith(prefix):
            extra.setdefault(_unescape(key[len(prefix) :].lower()), []).append(value)
    if not (username or groups or uid or extra):
        return None
    if not username:
        asked = [*(f"group {g}" for g in groups), *(f"extra {k}" for k in extra)]
        if uid:
            asked.append(f"uid {uid}")
        raise ImpersonationError(f"requested {asked} without impersonating a user")
    checks: list[ImpersonationRequest] = []
    account = split_service_account(username)
    if account is not None:
        checks.append(ImpersonationRequest("serviceaccounts", account[1], account[0]))
        final_groups = list(groups) or list(service_account_groups(account[0]))
    else:
        checks.append(ImpersonationRequest("users", username))
        final_groups = list(groups)
    checks.extend(ImpersonationRequest("groups", g) for g in groups)
    for key, values in extra.items():
        checks.extend(ImpersonationRequest("userextras", v, subresource=key) for v in values)
    if uid:
        checks.append(ImpersonationRequest("uids", uid))
    if username != "system:anonymous":
        if AUTHENTICATED not in final_groups and UNAUTHENTICATED not in final_groups:
            final_groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in final_groups:
        final_groups.append(UNAUTHENTICATED)
    user = UserInfo(
        username,
        tuple(final_groups),
        uid,
        tuple((k, tuple(v)) for k, v in sorted(extra.items())),
    )
    return user, checks


def _unescape(key: str) -> str:
    """Extra keys are percent-encoded in header names."""
    from urllib.parse import unquote

    return unquote(key)
