"""The alert pages and the inbox in words for people: a rule is named in words, not by its
slug, and what the portal did is said without Kueue's field names."""

from __future__ import annotations

import re

from django.utils import timezone

from alerts.choices import ActionState, AlertState, RuleKind, Severity
from alerts.models import Alert, AlertRule
from tests.pages import logged_in, main

CODES = ("quota-block", "idle-workload", "stopPolicy", "spec.active")


def _alert(world, kind: str, action_state: str, **extra) -> Alert:
    now = timezone.now()
    return Alert.objects.create(
        rule=AlertRule.objects.get(kind=kind), subject=f"{kind}:{action_state}",
        state=AlertState.FIRING, severity=Severity.CRITICAL, cluster=world.a100,
        tenant=world.team_a, message="team-a at its limit", fired_at=now, last_seen_at=now,
        action_state=action_state, **extra,
    )  # fmt: skip


def _words(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_lead_reads_the_rule_and_the_action_in_words(world):
    held = _alert(world, RuleKind.QUOTA_BLOCK, ActionState.BLOCKED, flavor=world.a100_gpu)
    suspended = _alert(
        world, RuleKind.IDLE_WORKLOAD, ActionState.SUSPENDED,
        workload_namespace="team-a-training", workload_name="stuck",
    )  # fmt: skip
    alice = logged_in(world.alice)

    listing = _words(main(alice.get("/alerts/")))
    assert "Quota limit reached" in listing and "Idle workload" in listing
    assert "New work held; running work continues" in listing
    assert "Workload suspended (taken off its GPUs), quota released" in listing
    for page in (
        listing,
        _words(main(alice.get(f"/alerts/{held.pk}/"))),
        _words(main(alice.get(f"/alerts/{suspended.pk}/"))),
    ):
        assert [code for code in CODES if code in page] == []
    assert re.search(r"<h1>\s*Quota limit reached", main(alice.get(f"/alerts/{held.pk}/")))


def test_only_who_may_acknowledge_is_offered_the_button(world):
    """carol (member of team-a) reads team-a's alerts but may not acknowledge them: the list
    offers her no button (the POST refuses her) and says who acts; alice (lead) gets one."""
    firing = _alert(world, RuleKind.QUOTA_BLOCK, ActionState.BLOCKED, flavor=world.a100_gpu)
    action = f"/alerts/{firing.pk}/acknowledge/"

    carol = logged_in(world.carol)
    listing = main(carol.get("/alerts/"))
    assert "team-a at its limit" in listing
    assert action not in listing and "Acknowledge</button>" not in listing
    assert "Only a lead of team-a or a platform admin acknowledges" in _words(listing)
    assert action not in main(carol.get(f"/alerts/{firing.pk}/"))
    carol.post(action)
    firing.refresh_from_db()
    assert firing.state == AlertState.FIRING  # the POST refuses her: the page did not lie

    alice = logged_in(world.alice)
    listing = main(alice.get("/alerts/"))
    assert action in listing and "Only a lead" not in listing
    alice.post(action)
    firing.refresh_from_db()
    assert firing.state == AlertState.ACKNOWLEDGED
