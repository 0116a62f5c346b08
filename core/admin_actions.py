"""Django admin's bulk delete through a service.

Django's own "Delete selected" deletes the queryset in one statement: no business rule is
asked and nothing is audited. A ModelAdmin whose rows are removed by a service lists
``delete_selected`` below in its ``actions`` (it takes the place of Django's, keeping its
confirmation page) and overrides ``delete_queryset`` with ``delete_each``: each row goes
through the service in a transaction of its own, and what a rule refuses stays, named in a
message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.db import transaction
from django.http import HttpRequest, HttpResponse

from core.errors import ApplicationError


def delete_each(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    objects: Iterable[Any],
    *,
    remove: Callable[[Any], object],
) -> list[str]:
    """Call ``remove(obj)`` (a service: audited, checked) for each of ``objects``, each in a
    transaction of its own; says what was removed and what was refused, and why, by name.
    Returns the names removed."""
    removed: list[str] = []
    for obj in objects:
        try:
            with transaction.atomic():
                remove(obj)
        except ApplicationError as exc:
            modeladmin.message_user(request, f"Not deleted: {obj}: {exc.message}", messages.ERROR)
        else:
            removed.append(str(obj))
    if removed:
        modeladmin.message_user(request, f"Deleted: {', '.join(removed)}.", messages.SUCCESS)
    return removed


@admin.action(permissions=["delete"], description="Delete selected %(verbose_name_plural)s")
def delete_selected(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: Any,
) -> HttpResponse | None:
    """Django's confirmation page first; once confirmed, the admin's ``delete_queryset`` (which
    calls the service per row) instead of Django's deletion and its "Successfully deleted"."""
    if request.POST.get("post"):
        modeladmin.delete_queryset(request, queryset)
        return None
    return django_delete_selected(modeladmin, request, queryset)
