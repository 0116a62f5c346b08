"""GET /api/v1/tenants/{slug}/usage/, POST /api/v1/usage/samples/ and /metrics: answers,
scoping, bad inputs, bounded queries, access."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.conftest import World
from usage import services
from usage.choices import Metric
from usage.models import Sample

pytestmark = pytest.mark.django_db
URL = "/api/v1/tenants/{}/usage/"


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seed(world: World, now: datetime, hours: int = 6) -> None:
    """team-a on the A100s: 6 guaranteed, 10 limit, use climbing 4 -> 9 (the last hour 9,
    3 of them borrowed); team-b uses 2. One sample every 5 minutes."""
    rows: list[Any] = []
    start = now - timedelta(hours=hours)
    for i in range(hours * 12):
        t = start + timedelta(minutes=5 * i)
        used = 4.0 + 5.0 * i / (hours * 12 - 1)
        for metric, value in (
            (Metric.QUOTA_USED, used),
            (Metric.QUOTA_GUARANTEED, 6.0),
            (Metric.QUOTA_LIMIT, 10.0),
            (Metric.QUOTA_BORROWED, max(used - 6.0, 0.0)),
        ):
            rows.append(
                (
                    t,
                    metric,
                    value,
                    world.a100.pk,
                    world.team_a.pk,
                    world.a100_gpu.pk,
                    None,
                    None,
                    None,
                    None,
                )
            )
        rows.append(
            (
                t,
                Metric.QUOTA_USED,
                2.0,
                world.a100.pk,
                world.team_b.pk,
                world.a100_gpu.pk,
                None,
                None,
                None,
                None,
            )
        )
    services.samples_write(rows=rows)
    services.rollups_run_all(now=now)


def test_a_lead_reads_hourly_usage_against_the_quota(
    world: World, api_as: Any, django_assert_max_num_queries: Any
) -> None:
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    seed(world, now)
    client = api_as(world.alice)
    params = {
        "start": iso(now - timedelta(hours=6)),
        "end": iso(now),
        "step": "PT1H",
        "cluster": "demo-a100",
    }
    with django_assert_max_num_queries(4):  # tenant, flavors, rollups (+ a savepoint at most)
        response = client.get(URL.format("team-a"), params)
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["tenant"], body["step_s"], body["source"]) == ("team-a", 3600, "1h")
    [series] = body["series"]
    assert (series["cluster"], series["flavor"], series["gpu_weight"]) == (
        "demo-a100",
        "a100-80gb",
        1.0,
    )
    assert len(series["points"]) == 6
    last = series["points"][-1]
    assert last["guaranteed"] == 6 and last["limit"] == 10
    assert last["used_max"] == pytest.approx(9.0)
    assert 8 < last["used"] < 9 and last["borrowed"] == pytest.approx(last["used"] - 6)
    assert last["used_units"] == pytest.approx(last["used"])
    first = series["points"][0]
    assert first["time"] == iso(now - timedelta(hours=6)) and first["used"] < 5
    # Five-minute steps read the 5-minute rollups; team-b's use is not in team-a's answer.
    fine = client.get(URL.format("team-a"), {**params, "step": "300"}).json()
    assert fine["source"] == "5m" and len(fine["series"][0]["points"]) == 72
    assert all(p["used"] >= 4 for p in fine["series"][0]["points"])


def test_units_follow_the_flavor_weight(world: World, api_as: Any) -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    services.samples_write(
        rows=[
            (
                now - timedelta(minutes=3),
                Metric.QUOTA_USED,
                3.0,
                world.h100.pk,
                world.team_a.pk,
                world.h100_gpu.pk,
                None,
                None,
                None,
                None,
            )
        ]
    )
    services.rollups_run_all(now=now)
    body = api_as(world.alice).get(URL.format("team-a"), {"flavor": "h100-80gb"}).json()
    [series] = body["series"]
    assert series["gpu_weight"] == 2.0
    assert series["points"][-1]["used"] == 3 and series["points"][-1]["used_units"] == 6


@pytest.mark.parametrize(
    ("user", "slug", "status"),
    [("bob", "team-a", 404), ("carol", "team-a", 200), ("victor", "team-a", 200),
     ("admin", "team-a", 200), ("alice", "no-such-team", 404), ("alice", "Bad_Slug", 404)],
)  # fmt: skip
def test_scoping(world: World, api_as: Any, user: str, slug: str, status: int) -> None:
    response = api_as(getattr(world, user)).get(URL.format(slug))
    assert response.status_code == status


def test_anonymous_callers_are_refused(world: World, api: Any) -> None:
    assert api.get(URL.format("team-a")).status_code in (401, 403)


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"start": "2026-12-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}, "start", "before end"),
        ({"start": "yesterday"}, "start", ""),
        ({"step": "0"}, "step", "whole number of seconds"),
        ({"step": "³"}, "step", "ISO 8601 duration"),
        ({"step": "٣٠٠"}, "step", "ISO 8601 duration"),
        ({"step": "9" * 5000}, "step", "whole number of seconds"),
        ({"step": "9" * 30}, "step", "whole number of seconds"),
        ({"step": "P999999999999D"}, "step", "whole number of seconds"),
        ({"step": "fortnight"}, "step", "ISO 8601 duration"),
        ({"step": "PT7M"}, "step", "multiple of 5 minutes"),
        ({"step": "PT5M", "start": "-25d"}, "step", "points"),
        ({"step": "PT5M", "start": "-40d"}, "start", "kept for 30 days"),
        ({"step": "PT1H", "start": "-500d"}, "start", "kept for 400 days"),
        ({"colour": "red"}, "colour", "Unknown field"),
    ],
)
def test_bad_ranges_and_steps_are_400_with_the_reason(
    world: World, api_as: Any, params: dict[str, str], field: str, says: str
) -> None:
    now = timezone.now()
    for key in ("start", "end"):
        if params.get(key, "").startswith("-"):
            params[key] = iso(now - timedelta(days=int(params[key][1:-1])))
    response = api_as(world.alice).get(URL.format("team-a"), params)
    assert response.status_code == 400, response.json()
    messages = " ".join(response.json()["fields"][field])
    assert says in messages
    if field == "start" and "kept for 30" in says:
        assert "Use a step of 1 hour" in messages  # what would work


def test_unknown_flavor_or_cluster_is_404(world: World, api_as: Any) -> None:
    client = api_as(world.alice)
    assert client.get(URL.format("team-a"), {"flavor": "v100"}).status_code == 404
    assert client.get(URL.format("team-a"), {"cluster": "nowhere"}).status_code == 404
    assert (
        client.get(
            URL.format("team-a"), {"cluster": "demo-a100", "flavor": "h100-80gb"}
        ).status_code
        == 404
    )


def test_a_sample_batch_with_one_bad_sample_is_refused_whole(world: World, api_as: Any) -> None:
    now = iso(timezone.now())
    good = {"time": now, "metric": "quota_used", "value": 3, "cluster_id": world.a100.pk,
            "tenant_id": world.team_a.pk, "flavor_id": world.a100_gpu.pk}  # fmt: skip
    admin = api_as(world.admin)
    response = admin.post(
        "/api/v1/usage/samples/", {"samples": [good, {**good, "value": "lots"}]}, format="json"
    )
    assert response.status_code == 400
    assert "samples[1].value" in response.json()["fields"]
    response = admin.post(
        "/api/v1/usage/samples/", {"samples": [good, {**good, "metric": "joy"}]}, format="json"
    )
    assert response.status_code == 400 and "samples[1].metric" in response.json()["fields"]
    assert Sample.objects.count() == 0
    assert (
        api_as(world.alice)
        .post("/api/v1/usage/samples/", {"samples": [good]}, format="json")
        .status_code
        == 403
    )
    response = admin.post("/api/v1/usage/samples/", {"samples": [good, good]}, format="json")
    assert response.status_code == 201 and response.json() == {"written": 2}
    assert Sample.objects.count() == 2


def test_metrics_need_the_token_or_an_allowed_network(
    world: World, client: Any, settings: Any
) -> None:
    now = timezone.now().replace(second=0, microsecond=0)
    seed(world, now, hours=1)
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    settings.METRICS_ALLOWED_CIDRS = []
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")
    assert ok.status_code == 200
    text = ok.content.decode()
    assert (
        'portal_quota_limit_gpus{cluster="demo-a100",flavor="a100-80gb",tenant="team-a"} 10.0'
        in text
    )
    assert (
        'portal_usage_gpus_used{cluster="demo-a100",flavor="a100-80gb",tenant="team-b"} 2.0' in text
    )
    assert "portal_sync_generations_behind" in text
    # Networks: the test client comes from 127.0.0.1.
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    settings.METRICS_ALLOWED_CIDRS = ["10.0.0.0/8"]
    assert client.get("/metrics").status_code == 403
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8"]
    assert client.get("/metrics").status_code == 200


@pytest.mark.parametrize(
    ("step", "days_back", "says"),
    [
        (
            timedelta(days=1),
            2000,
            "Daily usage totals are kept for 1830 days (about 5 years), so a range in steps "
            "of 1 day can start on 2021-11-30 at 12:00 UTC at the earliest.",
        ),
        (
            timedelta(hours=1),
            500,
            "Hourly usage totals are kept for 400 days (about 1 year), so a range in steps of "
            "1 hour can start on 2025-10-30 at 12:00 UTC at the earliest. Use a step of 1 day "
            "(or a multiple of it) to reach further back.",
        ),
        (
            timedelta(hours=2),
            500,
            "Hourly usage totals are kept for 400 days (about 1 year), so a range in steps of "
            "2 hours can start on 2025-10-30 at 12:00 UTC at the earliest. Use a step of 1 day "
            "(or a multiple of it) to reach further back.",
        ),
        (
            timedelta(minutes=5),
            40,
            "Usage totals per 5 minutes are kept for 30 days, so a range in steps of 5 "
            "minutes can start on 2026-11-04 at 12:00 UTC at the earliest. Use a step of "
            "1 hour (or a multiple of it) to reach further back.",
        ),
        (
            timedelta(seconds=60),
            4,
            "Raw usage samples are kept for 3 days, so a range in steps of 1 minute can start "
            "on 2026-12-01 at 12:00 UTC at the earliest. Use a step of 5 minutes (or a "
            "multiple of it) to reach further back.",
        ),
    ],
)
def test_a_start_older_than_what_is_kept_says_so_in_plain_words(
    step: timedelta, days_back: int, says: str
) -> None:
    from core.errors import ValidationFailed
    from usage.selectors import series_plan

    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    with pytest.raises(ValidationFailed) as refused:
        series_plan(start=now - timedelta(days=days_back), end=now, step=step, now=now)
    assert refused.value.fields == {"start": [says]}
