"""Which portal pages a notification's link leads to that its reader may still open.

A notification keeps its text for good, but the page it links to may since have closed to its
reader (they left the team, the tenant was handed over): the inbox then offers no link to a
bare 404 and says why. Tenant pages (``/tenants/<slug>/...``) are checked here; the pages of
the apps above this one are checked by functions the caller hands in (``page_checks``, keyed by
URL name: the portal's URLs compose the inbox with them, so this lowest app asks no app above
it). Every check is one query for a whole inbox page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from django.urls import Resolver404, resolve

from tenants.models import Tenant, User

# URL name (e.g. "portal:request-detail") -> (user, pks) -> the pks that exist and the user may
# no longer open (one that is gone keeps its link, as before).
PageChecks = Mapping[str, Callable[[User, set[int]], set[int]]]


# The pages where one asks to join a team: they open for anyone who asked there (the refusal
# notification links to them), member or not.
JOIN_PAGES = {"tenant-join", "tenant-join-withdraw"}


@dataclass(frozen=True)
class LinkTarget:
    path: str
    tenant_slug: str = ""  # a tenant page's tenant
    view_name: str = ""  # else a page checked by one of the page checks, with its key
    pk: int | None = None


def link_target(path: str) -> LinkTarget | None:
    """What ``path`` (a path on this site) opens; None when it resolves to no page."""
    try:
        match = resolve(path.split("?", 1)[0])
    except Resolver404:
        return None
    slug = match.kwargs.get("slug")
    if match.url_name in JOIN_PAGES:
        return LinkTarget(path)  # open to whoever asked to join there (unchecked)
    if isinstance(slug, str):
        return LinkTarget(path, tenant_slug=slug)
    pk = match.kwargs.get("pk")
    return LinkTarget(path, view_name=match.view_name, pk=pk if isinstance(pk, int) else None)


def closed_links(
    *, user: User, paths: Iterable[str], page_checks: PageChecks | None = None
) -> dict[str, str]:
    """Of ``paths``, those ``user`` may no longer open, each with why in words (naming only
    the tenant the notification named already); pages nobody checks stay open."""
    targets = [t for t in {link_target(p) for p in paths} if t is not None]
    closed: dict[str, str] = {}
    slugs = {t.tenant_slug for t in targets if t.tenant_slug}
    if slugs:
        open_slugs = set(
            Tenant.objects.visible_to(user).filter(slug__in=slugs).values_list("slug", flat=True)
        )
        for t in targets:
            if t.tenant_slug and t.tenant_slug not in open_slugs:
                closed[t.path] = f"You no longer have access to {t.tenant_slug}."
    by_view: dict[str, set[int]] = {}
    for t in targets:
        if t.view_name in (page_checks or {}) and t.pk is not None:
            by_view.setdefault(t.view_name, set()).add(t.pk)
    for view_name, pks in by_view.items():
        shut = (page_checks or {})[view_name](user, pks)
        for t in targets:
            if t.view_name == view_name and t.pk in shut:
                closed[t.path] = "You no longer have access to this page."
    return closed
