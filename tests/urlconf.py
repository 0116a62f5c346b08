"""Every route of the URL conf with its pattern, for the sweeps that must cover a new route
without anyone listing it (``tests/isolation/``, ``tests/security/``)."""

from __future__ import annotations

from collections.abc import Iterator

from django.urls import URLPattern, URLResolver, get_resolver


def url_patterns(
    resolver: URLResolver | None = None, prefix: str = ""
) -> Iterator[tuple[str, URLPattern]]:
    """(the route as written, its pattern), depth first through every ``include``."""
    for entry in (resolver or get_resolver()).url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from url_patterns(entry, route)
        else:
            yield route, entry
