"""What tests/ops/test_backup_restore.py asks of a portal running on a database (the source of a
dump, or the database restored from it), run in a process of its own pointed at that database
(``manage.py shell -c``): the API's answers, and writes the portal makes. Each prints one JSON
document on its last line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Sum
from django.test import Client

from core.errors import ValidationFailed
from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor
from quotas.selectors import flavor_capacities, guarantees_by_flavor
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.models import User
from usage.choices import Metric, Source
from usage.services import partition_name, samples_write

TENANT = "team-a"


def _pages(client: Client, path: str) -> list[Any]:
    """Every result of a paginated list (or the body of a plain one), in the API's order."""
    found: list[Any] = []
    url: str | None = path
    while url:
        response = client.get(url)
        assert response.status_code == 200, f"{url}: {response.status_code} {response.content!r}"
        body = response.json()
        if not isinstance(body, dict) or "results" not in body:
            return [body]
        found.extend(body["results"])
        url = body.get("next")
    return found


def reads(end: str) -> None:
    """The admin's answers from the tenants, quotas, requests and usage endpoints; the usage
    over the week before ``end`` (an ISO time), by the hour."""
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username="admin"))
    start = (datetime.fromisoformat(end) - timedelta(days=7)).isoformat()
    usage = f"/api/v1/tenants/{TENANT}/usage/?start={start}&end={end}&step=3600"
    answers = {
        path: _pages(client, path)
        for path in (
            "/api/v1/tenants/?page_size=200",
            f"/api/v1/tenants/{TENANT}/quotas/?page_size=200",
            "/api/v1/quota-requests/?page_size=200",
            usage.replace("+", "%2B"),
        )
    }
    print(json.dumps(answers, sort_keys=True))


def capacity_refusal() -> None:
    """A guarantee one GPU above what the other tenants' guarantees leave on a cluster that does
    not overcommit: refused, naming the field; the totals read are the quota rows' sums."""
    for cluster in Cluster.objects.filter(allow_guarantee_overcommit=False).order_by("name"):
        quota_set = QuotaSet.objects.filter(tenant__slug=TENANT, cluster=cluster).first()
        if quota_set is None:
            continue
        taken = guarantees_by_flavor(cluster=cluster, exclude_quota_set=quota_set)
        for (flavor_id, resource), capacity in flavor_capacities(cluster=cluster).items():
            if capacity.fleet is not None or resource != "nvidia.com/gpu":
                continue
            others = Quota.objects.filter(flavor_id=flavor_id, resource=resource).exclude(
                quota_set=quota_set
            )
            summed = others.aggregate(total=Sum("guaranteed"))["total"] or Decimal(0)
            held = taken.get((flavor_id, resource), Decimal(0))
            asked = capacity.amount - held + 1
            item = QuotaItem(ResourceFlavor.objects.get(pk=flavor_id), resource, asked, asked)
            try:
                quota_set_write(
                    tenant=quota_set.tenant, cluster=cluster, items=[item],
                    scheduling=SchedulingQuotas(), actor=User.objects.get(username="admin"),
                )  # fmt: skip
            except ValidationFailed as refused:
                fields = sorted(refused.fields)
                message = str(refused.fields.get("items[0].guaranteed", ""))
            else:
                fields, message = [], ""
            print(
                json.dumps(
                    {
                        "cluster": cluster.name,
                        "held": str(held),
                        "summed": str(summed),
                        "asked": str(asked),
                        "refused": fields,
                        "message": message,
                    }
                )
            )
            return
    raise AssertionError("no cluster without overcommit where team-a holds GPUs")


def sample_ahead(days: int) -> None:
    """One sample ``days`` from now, past the day partitions the dump had: its partition is
    created and the row is stored."""
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(days=days)
    cluster = Cluster.objects.order_by("name").first()
    assert cluster is not None
    row = (
        when,
        int(Metric.GPU_UTILIZATION),
        42.0,
        cluster.pk,
        None,
        None,
        None,
        "GPU-1",
        None,
        None,
    )
    written = samples_write(rows=[row], source=Source.NODE_AGENT)
    print(json.dumps({"written": written, "partition": partition_name(when.date())}))


def one_quota() -> None:
    """A cluster with 16 A100s and one tenant guaranteed 4 of them (the portal's write)."""
    from tests.factories import ClusterFactory, TenantFactory, gpu_flavor

    cluster = ClusterFactory(name="schema-check")
    flavor = gpu_flavor(cluster)
    quota_set_write(
        tenant=TenantFactory(slug="schema-check"), cluster=cluster, actor=None,
        items=[QuotaItem(flavor, "nvidia.com/gpu", Decimal(4), Decimal(8))],
        scheduling=SchedulingQuotas(),
    )  # fmt: skip
    print(json.dumps({"flavor": flavor.pk}))
