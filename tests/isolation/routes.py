"""Every route of the URL conf, each parameter classified, with concrete URLs for alice's
side, team-b's side and a side that does not exist.

A route parameter nobody classified fails with "add a sample for <param> in <route>", so a
new kind of route gets a sample rather than slipping past the sweep.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern, resolve
from rest_framework.permissions import BasePermission

from approvals.choices import RequestStatus
from tenants.api.base import IsPlatformAdmin, ReadMembersWriteAdmins
from tests.isolation.world import MISSING_PK, MISSING_SLUG, IsoWorld, Side
from tests.urlconf import url_patterns

_NAMED_GROUP = re.compile(r"\(\?P<(\w+)>(?:\[[^\]]*\]|\{[^}]*\}|[^)])*\)")
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")
# Django admin is for staff only and refuses everyone else before it looks anything up
# (tests/security/test_admin_pages.py); the agent's routes take a node token, not a user.
SKIPPED_PREFIXES = ("admin/",)
# The documentation site: the same built pages for everyone signed in, which name the demo's
# teams in their examples (tests/portal/test_help.py).
SKIPPED_NAMES = ("help", "help-page")
AGENT_PREFIX = "api/v1/agent/"
# Pages for platform admins only (the same rule as tests/security/test_admin_pages.py).
ADMIN_PAGE_PREFIXES = ("console/", "fleet/")


class Kind(enum.Enum):
    OWNED = "a tenant's object: another tenant's answers 404"
    SHARED = "the same for everyone (clusters, flavors, tiers)"
    ADMIN = "platform admins only: 403 for a lead"
    AGENT = "GPU node agents only (node token): 401/403 for a user"


Pick = Callable[[IsoWorld, Side, str], str]  # (world, side, route name) -> value


def _request_pk(world: IsoWorld, side: Side, name: str) -> str:
    """The side's request in the state the action needs, so that nothing but isolation stands
    between alice and a successful call."""
    action = name.rsplit("-", 1)[-1]
    status = {
        "submit": RequestStatus.DRAFT,
        "retry": RequestStatus.FAILED,
    }.get(action, RequestStatus.PENDING)
    return str(side.requests[status].pk)


@dataclass(frozen=True)
class Sample:
    kind: Kind
    pick: Pick
    missing: str | None = None  # what stands for "no such object"; None: keep the value


def _slug(world: IsoWorld, side: Side, name: str) -> str:
    return side.tenant.slug


def _namespace(world: IsoWorld, side: Side, name: str) -> str:
    """The side's tenant's first namespace (by name)."""
    return str(side.tenant.namespaces.order_by("name").values_list("name", flat=True)[0])


def _const(value: str) -> Pick:
    return lambda world, side, name: value


# (parameter name (regex), the route it appears in (regex), sample). First match wins.
SAMPLES: list[tuple[str, str, Sample]] = [
    ("tenant_slug", r"^api/v1/tenants/", Sample(Kind.OWNED, _slug, MISSING_SLUG)),
    ("slug", r"tenants/", Sample(Kind.OWNED, _slug, MISSING_SLUG)),
    ("username", r"members/", Sample(Kind.OWNED, lambda w, s, n: s.lead.username, "nobody")),
    ("username", r"^tenants/.*team/",
     Sample(Kind.OWNED, lambda w, s, n: s.lead.username, "nobody")),
    ("cluster", r"tenants/", Sample(Kind.SHARED, _const("demo-a100"))),
    ("cluster", r"prometheus-sources/", Sample(Kind.SHARED, _const("demo-a100"))),
    ("pk|id", r"quota-requests/|^requests/", Sample(Kind.OWNED, _request_pk, MISSING_PK)),
    ("pk", r"^api/v1/\^auth/tokens/",
     Sample(Kind.OWNED, lambda w, s, n: str(s.token.pk), MISSING_PK)),  # type: ignore[union-attr]
    ("pk", r"join-requests/|/join/|/team/asks/",
     Sample(Kind.OWNED, lambda w, s, n: str(s.join_request.pk), MISSING_PK)),  # type: ignore[union-attr]
    ("pk|id", r"workloads/",
     Sample(Kind.OWNED, lambda w, s, n: str(s.workload.pk), MISSING_PK)),  # type: ignore[union-attr]
    ("pk", r"grants/",
     Sample(Kind.OWNED, lambda w, s, n: str(s.grant.pk), MISSING_PK)),  # type: ignore[union-attr]
    ("pk", r"^inbox/",
     Sample(Kind.OWNED, lambda w, s, n: str(s.notification.pk), MISSING_PK)),  # type: ignore[union-attr]
    ("pk", r"^(api/v1/\^)?alerts/",
     Sample(Kind.OWNED, lambda w, s, n: str(s.alert.pk), MISSING_PK)),  # type: ignore[union-attr]
    ("pk", r"^api/v1/\^flavors/", Sample(Kind.SHARED, lambda w, s, n: str(w.a100_gpu.pk))),
    ("name", r"namespaces/", Sample(Kind.OWNED, _namespace, "no-such-namespace")),
    ("name", r"^api/v1/\^clusters/|^clusters/", Sample(Kind.SHARED, _const("demo-a100"))),
    ("name", r"^api/v1/\^tier-templates/", Sample(Kind.SHARED, _const("small"))),
    ("name", r"^api/v1/\^nodes/", Sample(Kind.ADMIN, lambda w, s, n: w.node.name, "no-node")),
    ("uuid", r"gpus/", Sample(Kind.ADMIN, lambda w, s, n: w.gpu.uuid, "GPU-0000")),
    ("pk", r"^fleet/plan/proposals/",
     Sample(Kind.ADMIN, lambda w, s, n: str(w.proposal.pk), MISSING_PK)),
    ("pk", r"^api/v1/\^identity-groups/",
     Sample(Kind.ADMIN, lambda w, s, n: str(w.group_mapping.pk), MISSING_PK)),
    ("id", r"^api/v1/agent/probes/",
     Sample(Kind.AGENT, lambda w, s, n: str(w.probe.pk), MISSING_PK)),
]  # fmt: skip


def _params(route: str) -> list[str]:
    return [m[1] for m in _NAMED_GROUP.finditer(route)] + _CONVERTER.findall(route)


def _sample(param: str, route: str) -> Sample:
    for name, where, sample in SAMPLES:
        if re.fullmatch(name, param) and re.search(where, route):
            return sample
    raise LookupError(f"add a sample for {param} in {route} (tests/isolation/routes.py)")


def _view_class(pattern: URLPattern) -> Any:
    callback = pattern.callback
    return getattr(callback, "cls", None) or getattr(callback, "view_class", None)


def _methods(pattern: URLPattern) -> tuple[str, ...]:
    callback = pattern.callback
    if actions := getattr(callback, "actions", None):  # a DRF viewset (HEAD is GET's twin)
        return tuple(sorted(set(actions) - {"head", "options"}))
    if view_class := getattr(callback, "view_class", None):  # a class-based view
        names = set(view_class.http_method_names) - {"head", "options", "trace"}
        return tuple(sorted(m for m in names if hasattr(view_class, m)))
    return ("get", "post")  # a function view: try reading and writing


@dataclass(frozen=True)
class Route:
    route: str
    pattern: URLPattern

    @property
    def name(self) -> str:
        return self.pattern.name or self.route

    @property
    def is_api(self) -> bool:
        return self.route.startswith("api/")

    @property
    def methods(self) -> tuple[str, ...]:
        return _methods(self.pattern)

    @property
    def params(self) -> list[str]:
        return _params(self.route)

    @property
    def samples(self) -> dict[str, Sample]:
        return {param: _sample(param, self.route) for param in _params(self.route)}

    def _permissions(self) -> list[type[BasePermission]]:
        view_class = _view_class(self.pattern)
        return list(getattr(view_class, "permission_classes", []) or [])

    def kind(self, method: str) -> Kind:
        """What alice (a lead, not an admin) must get for team-b's object by ``method``."""
        kinds = {s.kind for s in self.samples.values()}
        if self.route.startswith(AGENT_PREFIX) or Kind.AGENT in kinds:
            return Kind.AGENT
        permissions = self._permissions()
        if self.route.startswith(ADMIN_PAGE_PREFIXES) or Kind.ADMIN in kinds:
            return Kind.ADMIN
        if any(issubclass(p, IsPlatformAdmin) for p in permissions):
            return Kind.ADMIN
        if Kind.OWNED in kinds:
            return Kind.OWNED  # the tenant (or object) is looked up first: 404 for any method
        if method != "get" and any(issubclass(p, ReadMembersWriteAdmins) for p in permissions):
            return Kind.ADMIN
        return Kind.SHARED

    def url(self, world: IsoWorld, side: Side | None) -> str:
        """A concrete URL for ``side``'s objects; ``None``: objects that do not exist."""
        values = {}
        for param, sample in self.samples.items():
            if side is None and sample.missing is not None:
                values[param] = sample.missing
            else:
                values[param] = sample.pick(world, side or world.theirs, self.name)
        url = _NAMED_GROUP.sub(lambda m: values[m[1]], self.route)
        url = _CONVERTER.sub(lambda m: values[m[1]], url)
        url = "/" + url.replace("^", "").replace("$", "").replace("\\", "")
        match = resolve(url)  # the sample URL must reach the route it was made from
        assert match.url_name == self.pattern.name and match.func == self.pattern.callback, (
            url,
            self.route,
        )
        return url

    def openapi_path(self) -> str:
        """The route as the OpenAPI document spells paths, every parameter as ``{}``."""
        path = _NAMED_GROUP.sub("{}", self.route)
        path = _CONVERTER.sub("{}", path)
        return "/" + path.replace("^", "").replace("$", "").replace("\\", "")


def all_routes() -> list[Route]:
    routes = []
    for route, pattern in url_patterns():
        if route.startswith(SKIPPED_PREFIXES) or pattern.name in SKIPPED_NAMES:
            continue
        if "format" in _params(route):  # DRF's ".json" aliases of the routes collected here
            continue
        routes.append(Route(route, pattern))
    return routes
