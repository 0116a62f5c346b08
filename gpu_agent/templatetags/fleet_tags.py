"""Links to the fleet's pages that never break a page: a GPU whose stored UUID is no NVML UUID
(stored before UUIDs were checked, e.g. holding "/") has no page link, only its text."""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import mark_safe

from gpu_agent.models import is_gpu_uuid

register = template.Library()


@register.filter
def gpu_page_url(uuid: object) -> str:
    """The GPU's fleet page, or "" when ``uuid`` cannot be one (the template shows no link)."""
    if not is_gpu_uuid(uuid):
        return ""
    return reverse("portal:fleet-gpu", args=[uuid])


@register.filter
def profile_breaks(profile: object) -> str:
    """A MIG profile name ("1g.10gb+me") with line-break opportunities after its dot and before
    its "+", so that a narrow slice block wraps it into whole parts instead of cutting it."""
    text = str(escape(profile))
    return mark_safe(text.replace(".", ".<wbr>").replace("+", "<wbr>+"))  # noqa: S308 - escaped above
