"""Links to the fleet's pages that never break a page: a GPU whose stored UUID is no NVML UUID
(stored before UUIDs were checked, e.g. holding "/") has no page link, only its text."""

from __future__ import annotations

from django import template
from django.urls import reverse

from gpu_agent.models import is_gpu_uuid

register = template.Library()


@register.filter
def gpu_page_url(uuid: object) -> str:
    """The GPU's fleet page, or "" when ``uuid`` cannot be one (the template shows no link)."""
    if not is_gpu_uuid(uuid):
        return ""
    return reverse("portal:fleet-gpu", args=[uuid])
