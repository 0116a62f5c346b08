"""RBAC authorization as the API server's RBAC authorizer does it, over the stored Roles,
ClusterRoles, RoleBindings and ClusterRoleBindings: request attributes, rule matching,
forbidden messages, the rules a user holds in a namespace (SelfSubjectRulesReview), RBAC's own
escalation checks (``escalate`` / ``bind``) and the ClusterRole aggregation controller.

Bindings are indexed by subject (rebuilt when a binding changes), so a request looks only at
the bindings of its user, groups and service account.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcluster.auth import MASTERS, UserInfo, split_service_account
from devcluster.selectors import selector_matches
from devcluster.store import Store

RBAC_GROUP = "rbac.authorization.k8s.io"
ROLES = "roles.rbac.authorization.k8s.io"
CLUSTER_ROLES = "clusterroles.rbac.authorization.k8s.io"
ROLE_BINDINGS = "rolebindings.rbac.authorization.k8s.io"
CLUSTER_ROLE_BINDINGS = "clusterrolebindings.rbac.authorization.k8s.io"
BINDING_KEYS = frozenset({ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS})
AGGREGATION_MANAGER = "clusterrole-aggregation-controller"


@dataclass(frozen=True)
class RequestAttributes:
    """What the authorizer is asked about (``authorizer.Attributes`` upstream)."""

    verb: str
    resource_request: bool = True
    namespace: str = ""
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def forbidden_message(user: UserInfo, attributes: RequestAttributes) -> str:
    """The API server's wording of a denial (without the resource prefix)."""
    if not attributes.resource_request:
        return f"User {_q(user.name)} cannot {attributes.verb} path {_q(attributes.path)}"
    resource = attributes.combined_resource
    where = (
        f"in the namespace {_q(attributes.namespace)}"
        if attributes.namespace
        else "at the cluster scope"
    )
    return (
        f"User {_q(user.name)} cannot {attributes.verb} resource {_q(resource)} in API group "
        f"{_q(attributes.api_group)} {where}"
    )


def forbidden_status_message(user: UserInfo, attributes: RequestAttributes, reason: str) -> str:
    """``errors.NewForbidden`` around :func:`forbidden_message` (and the authorizer's reason)."""
    message = forbidden_message(user, attributes)
    if reason:
        message += ": " + reason
    if not attributes.resource_request:
        return f"forbidden: {message}"
    target = (
        f"{attributes.resource}.{attributes.api_group}"
        if attributes.api_group
        else attributes.resource
    )
    if attributes.name:
        return f"{target} {_q(attributes.name)} is forbidden: {message}"
    return f"{target} is forbidden: {message}"


# Rule matching ------------------------------------------------------------------------------------


def rule_allows(attributes: RequestAttributes, rule: dict[str, Any]) -> bool:
    verbs = rule.get("verbs") or ()
    if "*" not in verbs and attributes.verb not in verbs:
        return False
    if not attributes.resource_request:
        return _url_matches(rule.get("nonResourceURLs") or (), attributes.path)
    groups = rule.get("apiGroups") or ()
    if "*" not in groups and attributes.api_group not in groups:
        return False
    if not _resource_matches(
        rule.get("resources") or (), attributes.combined_resource, attributes.subresource
    ):
        return False
    names = rule.get("resourceNames") or ()
    return not names or attributes.name in names


def _resource_matches(resources: Any, combined: str, subresource: str) -> bool:
    for resource in resources:
        if resource in ("*", combined):
            return True
        if subresource and resource == "*/" + subresource:
            return True
    return False


def _url_matches(urls: Any, path: str) -> bool:
    for url in urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


# The authorizer ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Bound:
    """One subject of one binding, as the index keeps it."""

    binding_kind: str  # RoleBinding or ClusterRoleBinding
    binding_name: str
    namespace: str  # the RoleBinding's namespace; "" for a ClusterRoleBinding
    role_kind: str
    role_name: str
    subject: str  # as upstream describes it: User "alice"

    def describe(self) -> str:
        name = f"{self.binding_name}/{self.namespace}" if self.namespace else self.binding_name
        return f"{self.binding_kind} {_q(name)} of {self.role_kind} {_q(self.role_name)} to {self.subject}"


class Authorizer:
    """RBAC over one store (plus the ``system:masters`` group, allowed everything)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._index: dict[tuple[str, str], list[_Bound]] | None = None
        store.listeners.append(self._changed)

    def _changed(self, type_key: str, event: str, obj: dict[str, Any]) -> None:
        if type_key in BINDING_KEYS:
            self._index = None

    def invalidate(self) -> None:
        self._index = None

    def _build_index(self) -> dict[tuple[str, str], list[_Bound]]:
        index: dict[tuple[str, str], list[_Bound]] = {}
        for key, binding_kind in (
            (CLUSTER_ROLE_BINDINGS, "ClusterRoleBinding"),
            (ROLE_BINDINGS, "RoleBinding"),
        ):
            for binding in self.store.list(key):
                metadata, role_ref = binding["metadata"], binding.get("roleRef") or {}
                namespace = metadata.get("namespace", "") if binding_kind == "RoleBinding" else ""
                for subject in binding.get("subjects") or ():
                    kind, name = subject.get("kind"), subject.get("name", "")
                    if kind == "ServiceAccount":
                        account_namespace = subject.get("namespace") or namespace
                        if not account_namespace:
                            continue
                        index_key = ("ServiceAccount", f"{account_namespace}:{name}")
                        described = f"ServiceAccount {_q(name + '/' + account_namespace)}"
                    elif kind in ("User", "Group"):
                        index_key = (kind, name)
                        described = f"{kind} {_q(name)}"
                    else:
                        continue
                    index.setdefault(index_key, []).append(
                        _Bound(
                            binding_kind,
                            metadata["name"],
                            namespace,
                            role_ref.get("kind", ""),
                            role_ref.get("name", ""),
                            described,
                        )
                    )
        return index

    def _bindings(self, user: UserInfo, namespace: str) -> Iterator[_Bound]:
        """The user's ClusterRoleBindings, then its RoleBindings in ``namespace``."""
        if self._index is None:
            self._index = self._build_index()
        keys = [("User", user.name), *(("Group", g) for g in user.groups)]
        account = split_service_account(user.name)
        if account is not None:
            keys.append(("ServiceAccount", f"{account[0]}:{account[1]}"))
        found = [b for key in keys for b in self._index.get(key, ())]
        yield from (b for b in found if not b.namespace)
        if namespace:
            yield from (b for b in found if b.namespace == namespace)

    def _role_rules(self, bound: _Bound) -> tuple[list[dict[str, Any]], str]:
        """The rules of a binding's role, or an error when the role does not exist."""
        if bound.role_kind == "ClusterRole":
            role = self.store.get(CLUSTER_ROLES, "", bound.role_name)
            missing = f'clusterroles.{RBAC_GROUP} "{bound.role_name}" not found'
        elif bound.role_kind == "Role" and bound.namespace:
            role = self.store.get(ROLES, bound.namespace, bound.role_name)
            missing = f'roles.{RBAC_GROUP} "{bound.role_name}" not found'
        else:
            return [], f"unknown roleRef kind {bound.role_kind!r}"
        if role is None:
            return [], missing
        return list(role.get("rules") or ()), ""

    def authorize(self, user: UserInfo, attributes: RequestAttributes) -> tuple[bool, str]:
        """(allowed, reason): upstream's ``RBAC: allowed by ...`` when allowed, the role
        resolution errors (if any) when not."""
        if user.unrestricted or MASTERS in user.groups:
            return True, ""
        errors: list[str] = []
        for bound in self._bindings(user, attributes.namespace):
            rules, error = self._role_rules(bound)
            if error:
                errors.append(error)
            for rule in rules:
                if rule_allows(attributes, rule):
                    return True, f"RBAC: allowed by {bound.describe()}"
        return False, _aggregate(errors)

    def allowed(self, user: UserInfo, attributes: RequestAttributes) -> bool:
        return self.authorize(user, attributes)[0]

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict[str, Any]], list[str]]:
        """Every rule the user holds in ``namespace`` ("": cluster-wide only), and errors."""
        rules: list[dict[str, Any]] = []
        errors: list[str] = []
        for bound in self._bindings(user, namespace):
            found, error = self._role_rules(bound)
            rules.extend(found)
            if error:
                errors.append(error)
        return rules, errors

    # RBAC's escalation checks ----------------------------------------------------------------

    def escalation_allowed(self, user: UserInfo) -> bool:
        return user.unrestricted or MASTERS in user.groups

    def confirm_no_escalation(
        self, user: UserInfo, namespace: str, rules: list[dict[str, Any]]
    ) -> str | None:
        """None when the user holds every rule in ``rules`` (in ``namespace``); else upstream's
        ``user "bob" (groups=[...]) is attempting to grant RBAC permissions not currently
        held: ...``."""
        owned, errors = self.rules_for(user, namespace)
        missing = [
            atomic
            for rule in rules
            for atomic in _breakdown(rule)
            if not any(_rule_covers(owner, atomic) for owner in owned)
        ]
        if not missing:
            return None
        described = sorted({_compact_string(rule) for rule in _compact(missing)})
        message = (
            f"user {_q(user.name)} (groups={_go_strings(user.groups)}) is attempting to grant "
            "RBAC permissions not currently held:\n" + "\n".join(described)
        )
        if errors:
            message += f"; resolution errors: [{', '.join(errors)}]"
        return message

    def check_write(
        self,
        user: UserInfo,
        resource: str,
        namespace: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
    ) -> str | None:
        """RBAC's storage checks on creating or updating a role or a binding: None when
        allowed, else the reason of the 403."""
        if self.escalation_allowed(user):
            return None
        name = obj["metadata"]["name"]
        if resource in ("roles", "clusterroles"):
            if (
                old is not None
                and old.get("rules") == obj.get("rules")
                and (old.get("aggregationRule") == obj.get("aggregationRule"))
            ):
                return None  # nothing granted changes (labels, annotations, ...)
            escalate = RequestAttributes(
                "escalate", True, namespace, RBAC_GROUP, resource, name=name
            )
            if self.allowed(user, escalate):
                return None
            reason = self.confirm_no_escalation(user, namespace, list(obj.get("rules") or ()))
            if (
                reason is None
                and resource == "clusterroles"
                and obj.get("aggregationRule")
                and self.confirm_no_escalation(user, namespace, FULL_AUTHORITY) is not None
            ):
                return "must have cluster-admin privileges to use the aggregationRule"
            return reason
        role_ref = obj.get("roleRef") or {}
        role_kind, role_name = role_ref.get("kind", ""), role_ref.get("name", "")
        bind = RequestAttributes(
            "bind",
            True,
            namespace,
            RBAC_GROUP,
            "clusterroles" if role_kind == "ClusterRole" else "roles",
            name=role_name,
        )
        if self.allowed(user, bind):
            return None
        if role_kind == "ClusterRole":
            role = self.store.get(CLUSTER_ROLES, "", role_name)
            missing = f'clusterroles.{RBAC_GROUP} "{role_name}" not found'
        else:
            role = self.store.get(ROLES, namespace, role_name)
            missing = f'roles.{RBAC_GROUP} "{role_name}" not found'
        if role is None:
            return missing
        return self.confirm_no_escalation(user, namespace, list(role.get("rules") or ()))


FULL_AUTHORITY: list[dict[str, Any]] = [
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    {"nonResourceURLs": ["*"], "verbs": ["*"]},
]


def _breakdown(rule: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A rule as rules of one verb on one resource (and name) or one URL, as upstream's
    ``BreakdownRule``."""
    verbs = rule.get("verbs") or ()
    for group in rule.get("apiGroups") or ():
        for resource in rule.get("resources") or ():
            for verb in verbs:
                names = rule.get("resourceNames") or ()
                if names:
                    for name in names:
                        yield {
                            "apiGroups": [group],
                            "resources": [resource],
                            "resourceNames": [name],
                            "verbs": [verb],
                        }
                else:
                    yield {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
    for url in rule.get("nonResourceURLs") or ():
        for verb in verbs:
            yield {"nonResourceURLs": [url], "verbs": [verb]}


def _rule_covers(owner: dict[str, Any], sub: dict[str, Any]) -> bool:
    """upstream's ``ruleCovers`` for an atomic ``sub`` rule."""
    owner_verbs = owner.get("verbs") or ()
    if "*" not in owner_verbs and not all(v in owner_verbs for v in sub.get("verbs") or ()):
        return False
    owner_groups = owner.get("apiGroups") or ()
    if "*" not in owner_groups and not all(g in owner_groups for g in sub.get("apiGroups") or ()):
        return False
    owner_resources = owner.get("resources") or ()
    for resource in sub.get("resources") or ():
        if "*" in owner_resources or resource in owner_resources:
            continue
        if "/" in resource and "*/" + resource.split("/", 1)[1] in owner_resources:
            continue
        return False
    owner_urls = owner.get("nonResourceURLs") or ()
    for url in sub.get("nonResourceURLs") or ():
        if not _url_matches(owner_urls, url):
            return False
    owner_names, sub_names = owner.get("resourceNames") or (), sub.get("resourceNames") or ()
    if not sub_names:
        return not owner_names
    return not owner_names or all(n in owner_names for n in sub_names)


def _compact(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Atomic rules of one resource (and name) or URL merged into one rule with their verbs."""
    merged: dict[str, dict[str, Any]] = {}
    for rule in rules:
        key = json.dumps({k: v for k, v in rule.items() if k != "verbs"}, sort_keys=True)
        found = merged.setdefault(key, {**rule, "verbs": []})
        for verb in rule["verbs"]:
            if verb not in found["verbs"]:
                found["verbs"].append(verb)
    return list(merged.values())


def _compact_string(rule: dict[str, Any]) -> str:
    """upstream's ``PolicyRule.CompactString``: ``{APIGroups:[""], Resources:["pods"], Verbs:["get"]}``."""
    parts = [
        f"{label}:{_go_strings(rule[key])}"
        for key, label in (
            ("apiGroups", "APIGroups"),
            ("resources", "Resources"),
            ("nonResourceURLs", "NonResourceURLs"),
            ("resourceNames", "ResourceNames"),
            ("verbs", "Verbs"),
        )
        if rule.get(key)
    ]
    return "{" + ", ".join(parts) + "}"


def _q(value: str) -> str:
    """Go's ``%q`` of a string."""
    return json.dumps(value, ensure_ascii=False)


def _go_strings(values: Any) -> str:
    """Go's ``%q`` of a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(_q(v) for v in values) + "]"


def _aggregate(errors: list[str]) -> str:
    if not errors:
        return ""
    if len(errors) == 1:
        return errors[0]
    return "[" + ", ".join(errors) + "]"


# The ClusterRole aggregation controller --------------------------------------------------------------


def aggregate_cluster_roles(store: Store, next_version: Any) -> list[dict[str, Any]]:
    """Set the ``rules`` of every ClusterRole with an ``aggregationRule`` to the rules of the
    ClusterRoles its selectors match (by name, itself excluded, without duplicates), until
    nothing changes (``edit`` is aggregated into ``admin``). Returns the roles rewritten."""
    changed: list[dict[str, Any]] = []
    for _ in range(10):
        roles = store.list(CLUSTER_ROLES)
        moved = False
        for role in roles:
            rule = role.get("aggregationRule")
            if not isinstance(rule, dict):
                continue
            selectors = [s for s in rule.get("clusterRoleSelectors") or () if isinstance(s, dict)]
            rules: list[dict[str, Any]] = []
            for other in roles:
                if other["metadata"]["name"] == role["metadata"]["name"]:
                    continue
                labels = other["metadata"].get("labels") or {}
                if not any(selector_matches(s, labels) or not s for s in selectors):
                    continue
                for candidate in other.get("rules") or ():
                    if candidate not in rules:
                        rules.append(candidate)
            if rules == (role.get("rules") or []):
                continue
            updated = {**role, "rules": rules}
            updated["metadata"] = {**role["metadata"], "resourceVersion": next_version()}
            store.put(CLUSTER_ROLES, updated, created=False)
            changed.append(updated)
            moved = True
        if not moved:
            break
    return changed


# The bootstrap policy ------------------------------------------------------------------------------

BOOTSTRAP_FILE = Path(__file__).resolve().parent / "bootstrap_rbac.yaml"


@functools.cache
def _bootstrap_documents() -> tuple[str, ...]:
    with open(BOOTSTRAP_FILE, encoding="utf-8") as stream:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        documents = [d for d in yaml.load_all(stream, Loader=loader) if isinstance(d, dict)]
    return tuple(json.dumps(d) for d in documents)


def bootstrap_objects() -> list[dict[str, Any]]:
    """Fresh copies of the seeded ClusterRoles and ClusterRoleBindings."""
    return [json.loads(d) for d in _bootstrap_documents()]
