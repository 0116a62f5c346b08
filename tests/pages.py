"""Helpers of the portal page tests: a signed-in client and the page's text."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from typing import Any

from django.test import Client
from django.utils import timezone

from alerts.choices import AlertState, RuleKind, Severity
from alerts.models import Alert, AlertRule
from quotas.models import ResourceFlavor
from tenants.models import Tenant, User
from usage.choices import Metric, Resolution
from usage.models import Rollup
from usage.services import bucket_start


def logged_in(user: User | None, *, csrf: bool = False) -> Client:
    """A client signed in as ``user`` (anonymous for None); ``csrf`` enforces CSRF checks."""
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def text(response: Any) -> str:
    return unescape(response.content.decode())


def main(response: Any) -> str:
    """The page's <main>, unescaped, its tags' attributes kept (tests look for data-*)."""
    return re.split(r"<main\b[^>]*>", text(response), maxsplit=1)[1].split("</main>")[0]


def use_now(tenant: Tenant, flavor: ResourceFlavor, used: float) -> None:
    """Kueue's use of ``flavor`` by ``tenant`` in the last two 5-minute buckets (the latest wins)."""
    now = bucket_start(timezone.now(), Resolution.FIVE_MINUTES)
    key = {"resolution": Resolution.FIVE_MINUTES, "metric": Metric.QUOTA_USED,
           "cluster_id": flavor.cluster_id, "tenant_id": tenant.pk, "flavor_id": flavor.pk}  # fmt: skip
    Rollup.objects.bulk_create(
        Rollup(**key, bucket=when, samples=1, sum=value, min=value, max=value)
        for when, value in ((now - timedelta(minutes=5), 1.0), (now, used))
    )


def fire(tenant: Tenant, flavor: ResourceFlavor, *, state: str = AlertState.FIRING) -> Alert:
    """A quota alert on ``flavor`` for ``tenant`` in ``state`` (one per state and subject)."""
    now = timezone.now()
    return Alert.objects.create(
        rule=AlertRule.objects.filter(kind=RuleKind.QUOTA_WARNING).first(),
        subject=f"quota:{flavor.cluster_id}:{tenant.pk}:{flavor.pk}:{state}",
        state=state, severity=Severity.WARNING, cluster_id=flavor.cluster_id, tenant=tenant,
        flavor=flavor, message="over 80%", fired_at=now, last_seen_at=now,
    )  # fmt: skip
