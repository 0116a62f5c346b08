"""/metrics carries the alert gauges (the portal's URLs add them to usage.metrics.metrics_view)."""

from __future__ import annotations

from django.test import Client
from django.utils import timezone

from alerts import services
from tests.alerts.conftest import use_now


def test_open_alerts_and_held_tenants_are_gauges(world, settings):
    settings.METRICS_TOKEN = "scrape"
    now = timezone.now()
    use_now(world, world.team_b, 6, now=now)  # 100% of 6
    services.evaluate(now=now)

    body = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape").content.decode()

    assert (
        'portal_alerts_open{cluster="demo-a100",rule="quota-block",severity="critical",'
        'state="firing",tenant="team-b"} 1.0'
    ) in body
    assert 'portal_tenant_new_work_held{cluster="demo-a100",tenant="team-b"} 1.0' in body
    assert 'tenant="team-a"' not in body.split("portal_alerts_open")[1].split("# HELP")[0]
