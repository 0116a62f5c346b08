"""The create-only kinds the API server answers without storing anything: access reviews
(authorization.k8s.io/v1), TokenReview and SelfSubjectReview (authentication.k8s.io/v1), and
TokenRequest (``POST .../serviceaccounts/NAME/token``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devcluster.auth import BOUND_KINDS, DEFAULT_AUDIENCE, Tokens, UserInfo
from devcluster.errors import ApiError, bad_request, invalid, not_found
from devcluster.rbac import FULL_AUTHORITY, Authorizer, RequestAttributes
from devcluster.store import Store

AUTHORIZATION = "authorization.k8s.io/v1"
AUTHENTICATION = "authentication.k8s.io/v1"
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
DEFAULT_EXPIRATION = 3600


def _meta(body: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k in ("name", "namespace")}
    return {**metadata, "creationTimestamp": None}


def attributes_of(spec: dict[str, Any], namespace: str = "") -> RequestAttributes:
    """The authorizer attributes of a review's ``spec``."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(resource, dict):
        return RequestAttributes(
            verb=str(resource.get("verb", "")),
            resource_request=True,
            namespace=namespace or str(resource.get("namespace", "")),
            api_group=str(resource.get("group", "")),
            resource=str(resource.get("resource", "")),
            subresource=str(resource.get("subresource", "")),
            name=str(resource.get("name", "")),
        )
    if isinstance(non_resource, dict):
        return RequestAttributes(
            verb=str(non_resource.get("verb", "")),
            resource_request=False,
            path=str(non_resource.get("path", "")),
        )
    raise bad_request(
        "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes or "
        "resourceAttributes must be specified"
    )


class Reviews:
    def __init__(self, store: Store, authorizer: Authorizer, tokens: Tokens, admin_token: str):
        self.store = store
        self.authorizer = authorizer
        self.tokens = tokens
        self.admin_token = admin_token
        self.admin_user: UserInfo | None = None

    def _status(self, user: UserInfo, attributes: RequestAttributes) -> dict[str, Any]:
        allowed, reason = self.authorizer.authorize(user, attributes)
        status: dict[str, Any] = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return status

    def create(
        self, kind: str, body: dict[str, Any], user: UserInfo, namespace: str
    ) -> dict[str, Any]:
        """The answer to creating ``kind`` (the body with ``status`` filled in)."""
        spec = body.get("spec") or {}
        answer: dict[str, Any] = {
            "kind": kind,
            "apiVersion": AUTHENTICATION
            if kind in ("TokenReview", "SelfSubjectReview")
            else AUTHORIZATION,
            "metadata": _meta(body),
        }
        if kind == "SelfSubjectAccessReview":
            answer["spec"] = spec
            answer["status"] = self._status(user, attributes_of(spec))
        elif kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
            if not spec.get("user") and not spec.get("groups"):
                raise invalid(
                    kind,
                    "authorization.k8s.io",
                    "",
                    [
                        {
                            "reason": "FieldValueRequired",
                            "field": "spec.user",
                            "message": 'Invalid value: "": at least one of user or group '
                            "must be specified",
                        }
                    ],
                )
            if kind == "LocalSubjectAccessReview":
                asked = (spec.get("resourceAttributes") or {}).get("namespace", "")
                if asked and asked != namespace:
                    raise bad_request(
                        f"spec.resourceAttributes.namespace must match namespace: {namespace}"
                    )
            subject = UserInfo(
                str(spec.get("user", "")),
                tuple(spec.get("groups") or ()),
                str(spec.get("uid", "")),
                tuple((k, tuple(v)) for k, v in sorted((spec.get("extra") or {}).items())),
            )
            answer["spec"] = spec
            answer["status"] = self._status(subject, attributes_of(spec, namespace))
        elif kind == "SelfSubjectRulesReview":
            review_namespace = str(spec.get("namespace", ""))
            answer["spec"] = spec
            answer["status"] = self.rules_review(user, review_namespace)
        elif kind == "SelfSubjectReview":
            answer["status"] = {"userInfo": user.as_json()}
        elif kind == "TokenReview":
            answer["spec"] = spec
            answer["status"] = self.token_review(
                str(spec.get("token", "")), list(spec.get("audiences") or ())
            )
        else:
            raise ApiError(404, "the server could not find the requested resource")
        return answer

    def rules_review(self, user: UserInfo, namespace: str) -> dict[str, Any]:
        if user.unrestricted:
            rules: list[dict[str, Any]] = list(FULL_AUTHORITY)
            errors: list[str] = []
        else:
            rules, errors = self.authorizer.rules_for(user, namespace)
        resource_rules, non_resource_rules = [], []
        for rule in rules:
            if rule.get("nonResourceURLs"):
                non_resource_rules.append(
                    {"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]}
                )
            if rule.get("resources") or rule.get("apiGroups"):
                converted = {
                    "verbs": rule.get("verbs") or [],
                    "apiGroups": rule.get("apiGroups") or [],
                    "resources": rule.get("resources") or [],
                }
                if rule.get("resourceNames"):
                    converted["resourceNames"] = rule["resourceNames"]
                resource_rules.append(converted)
        status: dict[str, Any] = {
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": bool(errors),
        }
        if errors:
            status["evaluationError"] = ", ".join(errors)
        return status

    def token_review(self, token: str, audiences: list[str]) -> dict[str, Any]:
        user = self.authenticate_token(token)
        if user is None:
            why = self.tokens.invalid(token, self.uid_of)
            return {"user": {}, "error": why or "invalid bearer token"}
        token_audiences = self.tokens.audiences(token) or [DEFAULT_AUDIENCE]
        # No audiences asked: the API server's own (a token for another audience is refused).
        shared = [a for a in audiences or [DEFAULT_AUDIENCE] if a in token_audiences]
        if not shared:
            return {"user": {}, "error": "token audiences is invalid for the target audiences"}
        return {"authenticated": True, "user": user.as_json(), "audiences": shared}

    def authenticate_token(self, token: str) -> UserInfo | None:
        if token and token == self.admin_token:
            return self.admin_user
        return self.tokens.lookup(token, self.uid_of)

    def uid_of(self, type_key: str, namespace: str, name: str) -> str | None:
        """The uid of a stored object (a ServiceAccount, a token's bound Pod, its Node), None
        when there is none."""
        found = self.store.get(type_key, namespace, name)
        return None if found is None else str(found["metadata"].get("uid", ""))

    def _bound(
        self, namespace: str, account: str, ref: Any
    ) -> tuple[tuple[str, str, str] | None, tuple[str, str] | None]:
        """``spec.boundObjectRef`` checked as the API server does: a Pod or Secret of the
        ServiceAccount's namespace that exists (with the uid given, if any); a Pod must run as
        that ServiceAccount. A Pod on a Node that exists names that Node too (Kubernetes 1.30+,
        ServiceAccountTokenPodNodeInfo)."""
        if not ref:
            return None, None
        if not isinstance(ref, dict):
            raise bad_request("spec.boundObjectRef must be an object")
        kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        api_version, uid = str(ref.get("apiVersion") or ""), str(ref.get("uid") or "")
        if kind not in BOUND_KINDS or api_version != "v1":
            raise bad_request(f"cannot bind token for object of kind {kind!r} ({api_version!r})")
        found = self.store.get(BOUND_KINDS[kind], namespace, name)
        if found is None:
            raise not_found(BOUND_KINDS[kind], "", name)
        have = str(found["metadata"].get("uid", ""))
        if uid and uid != have:
            raise ApiError(
                409,
                f'Operation cannot be fulfilled on {kind} "{name}": the UID in the bound object '
                f"reference ({uid}) does not match the UID in record. The object might have "
                "been deleted and then recreated",
                reason="Conflict",
            )
        node = None
        if kind == "Pod":
            spec = found.get("spec") or {}
            if str(spec.get("serviceAccountName") or "default") != account:
                raise bad_request(
                    f'cannot bind token for serviceaccount "{account}" to pod running with '
                    "different serviceaccount name."
                )
            node_name = str(spec.get("nodeName") or "")
            node_uid = self.uid_of("nodes", "", node_name) if node_name else None
            if node_uid is not None:
                node = (node_name, node_uid)
        return (kind, name, have), node

    def token_request(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """``kubectl create token NAME``: a token for the ServiceAccount."""
        spec = dict(body.get("spec") or {})
        asked = spec.get("expirationSeconds")
        seconds = int(asked) if asked else DEFAULT_EXPIRATION
        cause = None
        if seconds < MIN_EXPIRATION:
            cause = "may not specify a duration less than 10 minutes"
        elif seconds > MAX_EXPIRATION:
            cause = "may not specify a duration larger than 2^32 seconds"
        if cause:
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "spec.expirationSeconds",
                        "message": f"Invalid value: {seconds}: {cause}",
                    }
                ],
            )
        account = self.store.get("serviceaccounts", namespace, name)
        if account is None:
            raise not_found("serviceaccounts", "", name)
        bound, node = self._bound(namespace, name, spec.get("boundObjectRef"))
        if bound is not None:
            spec["boundObjectRef"] = {**spec["boundObjectRef"], "uid": bound[2]}
        audiences = list(spec.get("audiences") or []) or [DEFAULT_AUDIENCE]
        token, expires_at = self.tokens.issue_service_account(
            namespace,
            name,
            str(account["metadata"]["uid"]),
            seconds,
            audiences,
            bound=bound,
            node=node,
        )
        spec["audiences"] = audiences
        spec["expirationSeconds"] = seconds
        spec.setdefault("boundObjectRef", None)
        return {
            "kind": "TokenRequest",
            "apiVersion": AUTHENTICATION,
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {
                "token": token,
                "expirationTimestamp": datetime.fromtimestamp(expires_at, UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                ),
            },
        }
