"""Writes for alerts: the evaluation (Celery beat, every minute), acknowledging, the actions
(holding a tenant's new work at 100%, R11, through ``quotas.services.quota_set_hold``;
suspending an idle workload after telling the lead, and undoing it, R12, through
``quotas.backends.workload_set_active``) and notifications (inbox and email through
``tenants.services.notify``, webhooks through Celery with retries, enqueued by task name).

``evaluate`` is idempotent: the same usage gives the same alerts, whatever the number of runs
(one open alert per (rule, subject), a PostgreSQL advisory lock serialises concurrent runs).
It never talks to a webhook: it writes delivery rows and enqueues them after commit. The only
I/O it does is the suspension of a workload whose grace has passed, after its transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from alerts import selectors
from alerts.choices import (
    OPEN_STATES,
    ActionState,
    AlertState,
    DeliveryState,
    EventKind,
    RuleKind,
    Severity,
    WebhookFormat,
)
from alerts.models import Alert, AlertEvent, AlertRule, Webhook, WebhookDelivery
from alerts.webhooks import WebhookRefused, WebhookUnanswered, post_json, status_error
from core.errors import Conflict, PermissionDenied
from core.tasks import enqueue
from quotas.backends import workload_set_active
from quotas.kube.applier import ApplyError
from quotas.services import quota_set_hold
from tenants.models import User
from tenants.services import audit_record, notify
from usage.models import Workload

logger = logging.getLogger(__name__)

# "alrt": the namespace of the evaluation's advisory lock.
EVALUATION_LOCK = (0x616C7274, 1)
DEFAULT_GRACE = timedelta(days=1)
SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


def _event(
    alert: Alert,
    kind: str,
    at: datetime,
    *,
    actor: User | None = None,
    detail: dict[str, Any] | None = None,
) -> AlertEvent:
    return AlertEvent.objects.create(
        alert=alert,
        kind=kind,
        at=at,
        actor=actor if actor is not None and actor.pk else None,
        actor_username=actor.get_username() if actor is not None else "system",
        detail=detail or {},
    )


def alert_url(alert: Alert) -> str:
    return f"/alerts/{alert.pk}/"


# --- notifications ---------------------------------------------------------------------------


def _notify(alert: Alert, event: str, subject: str, body: str) -> None:
    """Inbox and email for the tenant's leads, and a delivery per webhook; all sent after
    commit (no change, no notification)."""
    if alert.tenant_id is not None:
        leads = selectors.tenant_leads(tenant_id=alert.tenant_id)
        notify(users=leads, subject=subject, body=body, url=alert_url(alert))
    webhook_deliveries_create(alert=alert, event=event)


def alert_payload(alert: Alert, event: str) -> dict[str, Any]:
    """The JSON body of a webhook notification."""
    return {
        "event": event,
        "alert": {
            "id": alert.pk,
            "rule": alert.rule.name,
            "kind": alert.rule.kind,
            "severity": alert.severity,
            "state": alert.state,
            "subject": alert.subject,
            "cluster": alert.cluster.name if alert.cluster else None,
            "tenant": alert.tenant.slug if alert.tenant else None,
            "flavor": alert.flavor.name if alert.flavor else None,
            "workload": (
                f"{alert.workload_namespace}/{alert.workload_name}" if alert.workload_name else None
            ),
            "message": alert.message,
            "value": alert.value,
            "threshold": alert.threshold,
            "fired_at": alert.fired_at.isoformat(),
            "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
            "action": alert.action_state,
            "action_due_at": alert.action_due_at.isoformat() if alert.action_due_at else None,
            "url": f"{settings.PORTAL_URL.rstrip('/')}{alert_url(alert)}",
        },
    }


def slack_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The same notification in Slack's incoming-webhook format (text plus one block)."""
    alert = payload["alert"]
    where = " ".join(str(alert[k]) for k in ("tenant", "cluster") if alert.get(k))
    title = f"[{alert['severity'].upper()}] {alert['rule']} {payload['event']}: {where}".strip()
    text = f"{title}\n{alert['message']}"
    return {
        "text": text,
        "blocks": [
            {
                "type": "section",
                "text": {
                    "type": "mrkdwn",
                    "text": f"*{title}*\n{alert['message']}\n<{alert['url']}|Open in the portal>",
                },
            }
        ],
    }


def webhook_deliveries_create(*, alert: Alert, event: str) -> list[int]:
    """One delivery row per enabled webhook whose minimum severity the alert reaches,
    enqueued after commit."""
    rank = SEVERITY_RANK.get(Severity(alert.severity), 0)
    hooks = [
        h
        for h in Webhook.objects.filter(enabled=True)
        if SEVERITY_RANK.get(Severity(h.min_severity), 0) <= rank
    ]
    if not hooks:
        return []
    body = alert_payload(alert, event)
    rows = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook=h,
            alert=alert,
            event=event,
            payload=slack_payload(body) if h.format == WebhookFormat.SLACK else body,
        )
        for h in hooks
    )
    ids = [r.pk for r in rows]
    transaction.on_commit(lambda: enqueue_deliveries(ids))
    return ids


# Enqueued by name: ``alerts.tasks`` imports this module, not the other way round.
DELIVER_WEBHOOK_TASK = "alerts.tasks.deliver_webhook"


def enqueue_deliveries(ids: list[int]) -> None:
    """Each delivery is its own task, so a slow or failing webhook delays no other. A broker
    that is down is logged: the sweep sends the rows later."""
    for delivery_id in ids:
        try:
            enqueue(DELIVER_WEBHOOK_TASK, [delivery_id])
        except Exception:
            logger.warning("webhook delivery %s not enqueued now", delivery_id, exc_info=True)


def retry_delay(attempts: int) -> float:
    """Exponential backoff after the ``attempts``-th failure: base, 2x base, 4x base, ...,
    capped."""
    base = float(settings.ALERT_WEBHOOK_BACKOFF_S)
    return float(min(base * 2 ** max(attempts - 1, 0), settings.ALERT_WEBHOOK_BACKOFF_MAX_S))


@dataclass
class DeliveryOutcome:
    sent: bool
    retry_in: float | None = None  # seconds until the next attempt; None: done (sent or gave up)
    error: str = ""


def webhook_deliver(*, delivery_id: int, now: datetime | None = None) -> DeliveryOutcome:
    """Send one delivery once it is due (``alerts.webhooks.post_json``). 2xx: sent. No answer
    (a timeout, a connection error), 408, 429 or 5xx: retried later with backoff
    (``retry_in``), up to ``ALERT_WEBHOOK_MAX_ATTEMPTS``; a 3xx (never followed), another 4xx,
    or a URL that is refused (an internal address, credentials in it): failed for good. The
    error stored is generic ("the endpoint did not answer", "the endpoint answered 500"). Claimed with a conditional update, so two workers never
    send the same row at once."""
    now = now or timezone.now()
    timeout = float(settings.ALERT_WEBHOOK_TIMEOUT_S)
    claimed = (
        WebhookDelivery.objects.filter(pk=delivery_id, state=DeliveryState.PENDING)
        .filter(
            Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + timedelta(seconds=1))
        )
        .update(attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=timeout * 2))
    )
    if not claimed:
        return DeliveryOutcome(sent=False)
    delivery = WebhookDelivery.objects.select_related("webhook").get(pk=delivery_id)
    status: int | None = None
    refused = False
    try:
        status = post_json(delivery.webhook.url, delivery.payload, timeout)
        error = "" if 200 <= status < 300 else status_error(status)
    except WebhookRefused as exc:
        refused, error = True, f"not sent: {exc}"
    except WebhookUnanswered as exc:
        error = str(exc)
    done = timezone.now()
    if not error:
        WebhookDelivery.objects.filter(pk=delivery_id).update(
            state=DeliveryState.SENT, sent_at=done, last_status=status, last_error="",
            next_attempt_at=None,
        )  # fmt: skip
        return DeliveryOutcome(sent=True)
    permanent = refused or (status is not None and 300 <= status < 500 and status not in (408, 429))
    if permanent or delivery.attempts >= settings.ALERT_WEBHOOK_MAX_ATTEMPTS:
        WebhookDelivery.objects.filter(pk=delivery_id).update(
            state=DeliveryState.FAILED, last_status=status, last_error=error[:2000],
            next_attempt_at=None,
        )  # fmt: skip
        logger.warning("webhook %s gave up after %s attempts: %s", delivery.webhook.name,
                       delivery.attempts, error)  # fmt: skip
        return DeliveryOutcome(sent=False, error=error)
    delay = retry_delay(delivery.attempts)
    WebhookDelivery.objects.filter(pk=delivery_id).update(
        last_status=status, last_error=error[:2000], next_attempt_at=done + timedelta(seconds=delay)
    )
    return DeliveryOutcome(sent=False, retry_in=delay, error=error)


def deliveries_sweep(*, now: datetime | None = None) -> list[int]:
    """Re-enqueue pending deliveries no worker has sent by their due time (the broker was
    down, a worker died): safe to run twice, the claim sends each row once."""
    now = now or timezone.now()
    grace = timedelta(seconds=60)
    due = WebhookDelivery.objects.filter(state=DeliveryState.PENDING).filter(
        Q(next_attempt_at__isnull=True, created_at__lt=now - grace)
        | Q(next_attempt_at__lt=now - grace)
    )
    ids = list(due.values_list("pk", flat=True)[:1000])
    enqueue_deliveries(ids)
    return ids


# --- the evaluation --------------------------------------------------------------------------


@dataclass
class EvaluationSummary:
    fired: int = 0
    still_firing: int = 0
    resolved: int = 0
    blocked: int = 0
    unblocked: int = 0
    suspension_notices: int = 0
    suspended: int = 0
    suspend_failed: int = 0
    unobserved: int = 0  # open quota alerts kept as they are: no recent use to judge them by


QUOTA_RULES = (RuleKind.QUOTA_WARNING, RuleKind.QUOTA_BLOCK)
# Rules about one workload that can suspend it after a grace (and be undone).
SUSPENDING_RULES = (RuleKind.IDLE_WORKLOAD, RuleKind.MAX_RUNTIME)


def hold_source(alert: Alert) -> str:
    """The name an alert's hold goes by in quotas (``QuotaHold.source``): one per alert, so
    two alerts holding one tenant are lifted independently."""
    return f"alert:{alert.pk}"


# The hysteresis of a quota alert (and its hold): once fired it stays at least this long,
# whatever the readings, so a tenant whose use swings around its limit from one collection to
# the next is held and allowed again at most once in this time, not at every reading.
QUOTA_MIN_FIRING = timedelta(minutes=5)


def _too_soon_to_clear(alert: Alert, now: datetime) -> bool:
    return alert.rule.kind in QUOTA_RULES and now - alert.fired_at < QUOTA_MIN_FIRING


def _lock() -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", list(EVALUATION_LOCK))


def _fire(
    rule: AlertRule, finding: selectors.Finding, now: datetime, summary: EvaluationSummary
) -> Alert:
    alert = Alert.objects.create(
        rule=rule,
        subject=finding.subject,
        severity=rule.severity,
        cluster_id=finding.cluster_id,
        tenant_id=finding.tenant_id,
        flavor_id=finding.flavor_id,
        workload_id=finding.workload_id,
        workload_namespace=finding.workload_namespace,
        workload_name=finding.workload_name,
        message=finding.message,
        value=finding.value,
        threshold=finding.threshold,
        fired_at=now,
        last_seen_at=now,
    )
    summary.fired += 1
    _event(alert, EventKind.FIRED, now, detail={"value": finding.value, "message": finding.message})
    subject = f"[{rule.severity}] {rule.title}: {finding.message}"
    body = finding.message
    tenant = alert.tenant
    if rule.kind == RuleKind.QUOTA_BLOCK and rule.act and finding.tenant_id and finding.cluster_id:
        alert.action_state = ActionState.BLOCKED
        alert.save(update_fields=["action_state"])
        _event(alert, EventKind.BLOCKED, now)
        quota_set_hold(
            tenant_id=finding.tenant_id, cluster_id=finding.cluster_id, held=True,
            source=hold_source(alert), detail={"alert": alert.pk, "message": finding.message},
        )  # fmt: skip
        summary.blocked += 1
        body += (
            "\n\nNew work of the team on this cluster is held: running work continues, new "
            "work waits until use drops below the threshold."
        )
    elif rule.kind in SUSPENDING_RULES and (rule.act or finding.act):
        alert.action_state = ActionState.NOTIFIED
        alert.action_due_at = now + (rule.grace if rule.grace is not None else DEFAULT_GRACE)
        alert.save(update_fields=["action_state", "action_due_at"])
        _event(alert, EventKind.SUSPENSION_NOTICE, now,
               detail={"due_at": alert.action_due_at.isoformat()})  # fmt: skip
        audit_record(
            actor=None, action="workload.suspension_scheduled", obj=alert,
            tenant=tenant, object_id=f"{finding.workload_namespace}/{finding.workload_name}",
            after={"due_at": alert.action_due_at.isoformat(), "alert": alert.pk},
        )  # fmt: skip
        summary.suspension_notices += 1
        unless = (
            "unless it shows activity"
            if rule.kind == RuleKind.IDLE_WORKLOAD
            else "unless it finishes first"
        )
        still = "still idle" if rule.kind == RuleKind.IDLE_WORKLOAD else "still running"
        subject = (
            f"{finding.workload_namespace}/{finding.workload_name} will be suspended "
            f"at {alert.action_due_at:%Y-%m-%d %H:%M} UTC {unless}"
        )
        body += (
            f"\n\nIt will be suspended (taken off its GPUs, its quota released) at "
            f"{alert.action_due_at:%Y-%m-%d %H:%M} UTC if it is {still} then. Suspension "
            "can be undone from the alert's page."
        )
    _notify(alert, EventKind.FIRED, subject, body)
    return alert


def _resolve(alert: Alert, now: datetime, summary: EvaluationSummary, why: str) -> None:
    alert.state = AlertState.RESOLVED
    alert.resolved_at = now
    alert.save(update_fields=["state", "resolved_at"])
    summary.resolved += 1
    if alert.action_state == ActionState.BLOCKED and alert.tenant_id and alert.cluster_id:
        _event(alert, EventKind.UNBLOCKED, now)
        quota_set_hold(
            tenant_id=alert.tenant_id, cluster_id=alert.cluster_id, held=False,
            source=hold_source(alert), detail={"alert": alert.pk},
        )  # fmt: skip
        summary.unblocked += 1
    _event(alert, EventKind.RESOLVED, now, detail={"why": why})
    if alert.action_state == ActionState.BLOCKED:
        _notify(alert, EventKind.RESOLVED, f"New work allowed again: {alert.tenant.slug if alert.tenant else ''}",
                f"{why}\n\nThe ClusterQueue's hold is lifted.")  # fmt: skip
    else:
        webhook_deliveries_create(alert=alert, event=EventKind.RESOLVED)


def _keep_suspended(alert: Alert) -> bool:
    """A suspended workload's alert stays open (with its undo) until the workload is gone."""
    if alert.action_state != ActionState.SUSPENDED or alert.workload_id is None:
        return False
    return Workload.objects.filter(pk=alert.workload_id, finished_at__isnull=True).exists()


def _refresh(
    alert: Alert, finding: selectors.Finding, now: datetime, summary: EvaluationSummary
) -> None:
    """An open alert whose condition still holds: its latest value and words."""
    summary.still_firing += 1
    Alert.objects.filter(pk=alert.pk).update(
        last_seen_at=now, value=finding.value, message=finding.message
    )


def _fire_new(
    rules: list[AlertRule],
    found: dict[int, dict[str, selectors.Finding]],
    seen: set[tuple[int, str]],
    now: datetime,
    summary: EvaluationSummary,
) -> None:
    """Fire each finding that no open alert of its rule and subject already holds."""
    for rule in rules:
        for subject, finding in found[rule.pk].items():
            if (rule.pk, subject) not in seen:
                _fire(rule, finding, now, summary)


def evaluate(*, now: datetime | None = None) -> EvaluationSummary:
    """Every enabled rule against the usage store now: new conditions fire (deduplicated by
    (rule, subject)), ones that hold are refreshed, ones that no longer hold (or whose rule
    was disabled) resolve. Then idle workloads past their grace are suspended."""
    now = now or timezone.now()
    summary = EvaluationSummary()
    with transaction.atomic():
        _lock()
        rules = list(
            AlertRule.objects.filter(enabled=True).select_related("cluster").order_by("pk")
        )
        found = {
            rule.pk: {f.subject: f for f in selectors.rule_findings(rule, now=now)}
            for rule in rules
        }
        by_pk = {rule.pk: rule for rule in rules}
        open_alerts = list(
            Alert.objects.select_for_update(of=("self",))
            .filter(state__in=OPEN_STATES)
            .select_related("rule", "cluster", "tenant", "flavor")
        )
        unobserved = selectors.unobserved_quota_subjects(
            subjects=[a.subject for a in open_alerts if a.rule.kind in QUOTA_RULES],
            now=now,
        )
        seen: set[tuple[int, str]] = set()
        for alert in open_alerts:
            seen.add((alert.rule_id, alert.subject))
            finding = found.get(alert.rule_id, {}).get(alert.subject)
            if finding is None:
                if alert.rule_id in by_pk and _keep_suspended(alert):
                    continue
                if alert.rule_id in by_pk and alert.subject in unobserved:
                    summary.unobserved += 1
                    continue
                if alert.rule_id in by_pk and _too_soon_to_clear(alert, now):
                    summary.still_firing += 1
                    continue
                why = (
                    "the rule is disabled"
                    if alert.rule_id not in by_pk
                    else "the condition cleared"
                )
                _resolve(alert, now, summary, why)
                continue
            _refresh(alert, finding, now, summary)
        _fire_new(rules, found, seen, now, summary)
        due = list(
            Alert.objects.filter(
                Q(rule__kind=RuleKind.IDLE_WORKLOAD, rule__act=True)
                # A tenant's own maximum run time acts whatever the rule says (its notice
                # was only given where it acts).
                | Q(rule__kind=RuleKind.MAX_RUNTIME),
                state__in=OPEN_STATES,
                rule__enabled=True,
                action_state=ActionState.NOTIFIED,
                action_due_at__lte=now,
            ).values_list("pk", flat=True)
        )
    for alert_id in due:
        if workload_suspend(alert_id=alert_id, now=now):
            summary.suspended += 1
        else:
            summary.suspend_failed += 1
    return summary


def evaluate_quotas_collected(
    *, cluster_id: int, tenant_ids: Sequence[int], now: datetime | None = None
) -> EvaluationSummary:
    """The quota rules for the tenants a collection of ``cluster_id`` just wrote readings of,
    right after it commits: a tenant that reached its limit is held within one collection
    (plus the push), not after the roll-up and the next evaluation. The same rules, findings,
    hysteresis (``QUOTA_MIN_FIRING``), audit and push as ``evaluate``, under the same lock; only
    these (cluster, tenant) subjects are judged, so one tenant's readings never touch another's
    alerts. ``evaluate`` (beat) stays the backstop."""
    now = now or timezone.now()
    summary = EvaluationSummary()
    tenants = sorted({int(t) for t in tenant_ids})
    if not tenants:
        return summary
    with transaction.atomic():
        _lock()
        rules = list(
            AlertRule.objects.filter(enabled=True, kind__in=QUOTA_RULES)
            .filter(Q(cluster__isnull=True) | Q(cluster_id=cluster_id))
            .select_related("cluster")
            .order_by("pk")
        )
        if not rules:
            return summary
        found = {
            rule.pk: {
                f.subject: f
                for f in selectors.quota_findings(
                    rule, now=now, cluster_ids=[cluster_id], tenant_ids=tenants
                )
            }
            for rule in rules
        }
        open_alerts = list(
            Alert.objects.select_for_update(of=("self",))
            .filter(
                state__in=OPEN_STATES,
                rule__in=[r.pk for r in rules],
                cluster_id=cluster_id,
                tenant_id__in=tenants,
            )
            .select_related("rule", "cluster", "tenant", "flavor")
        )
        unobserved = selectors.unobserved_quota_subjects(
            subjects=[a.subject for a in open_alerts], now=now
        )
        seen: set[tuple[int, str]] = set()
        for alert in open_alerts:
            seen.add((alert.rule_id, alert.subject))
            finding = found[alert.rule_id].get(alert.subject)
            if finding is None:
                if alert.subject in unobserved:
                    summary.unobserved += 1
                elif _too_soon_to_clear(alert, now):
                    summary.still_firing += 1
                else:
                    _resolve(alert, now, summary, "the condition cleared")
                continue
            _refresh(alert, finding, now, summary)
        _fire_new(rules, found, seen, now, summary)
    return summary


# --- suspending an idle workload, and undoing it ---------------------------------------------


def workload_suspend(*, alert_id: int, now: datetime | None = None) -> bool:
    """Suspend the idle workload of an alert whose grace has passed (``spec.active: false``);
    audited, the lead told. A refusal or an unreachable cluster is recorded and retried by the
    next evaluation."""
    now = now or timezone.now()
    alert = (
        Alert.objects.select_related("cluster", "tenant", "rule")
        .filter(pk=alert_id, state__in=OPEN_STATES, action_state=ActionState.NOTIFIED)
        .first()
    )
    if alert is None or alert.cluster is None:
        return False
    try:
        workload_set_active(
            cluster=alert.cluster,
            namespace=alert.workload_namespace,
            name=alert.workload_name,
            active=False,
        )
    except ApplyError as exc:
        with transaction.atomic():
            changed = (
                Alert.objects.filter(pk=alert.pk)
                .exclude(action_error=exc.message)
                .update(action_error=exc.message[:2000])
            )
            if changed:
                _event(alert, EventKind.SUSPEND_FAILED, now, detail={"error": exc.message})
        logger.warning("suspending %s failed: %s", alert.subject, exc.message)
        return False
    with transaction.atomic():
        done = Alert.objects.filter(
            pk=alert.pk, state__in=OPEN_STATES, action_state=ActionState.NOTIFIED
        ).update(action_state=ActionState.SUSPENDED, action_error="")
        if not done:
            return False
        alert.action_state = ActionState.SUSPENDED
        workload = f"{alert.workload_namespace}/{alert.workload_name}"
        _event(alert, EventKind.SUSPENDED, now, detail={"workload": workload})
        audit_record(
            actor=None, action="workload.suspended", obj=alert, tenant=alert.tenant,
            object_id=workload, before={"active": True}, after={"active": False, "alert": alert.pk},
        )  # fmt: skip
        why = "idle" if alert.rule.kind == RuleKind.IDLE_WORKLOAD else "past its maximum run time"
        _notify(
            alert, EventKind.SUSPENDED, f"{workload} was suspended ({why}); its quota is released",
            f"{alert.message}\n\nIt was taken off its GPUs and stays out of the queue. Undo the "
            "suspension from the alert's page to queue it again.",
        )  # fmt: skip
    return True


def _check_may_act(alert: Alert, actor: User) -> None:
    """Members read their tenants' alerts; leads and platform admins act on them."""
    if not selectors.alert_may_act(user=actor, alert=alert):
        tenant = alert.tenant.slug if alert.tenant else "the tenant"
        raise PermissionDenied(
            f"Only a lead of {tenant} or a platform admin acts on its alerts; you can read them."
        )


def alert_reactivate(*, alert: Alert, actor: User, now: datetime | None = None) -> Alert:
    """Undo a suspension: ``spec.active: true`` again; the workload queues and is not suspended
    again while this alert is open (the undo counts as progress). 409 when the alert's workload
    is not suspended, or the cluster refuses."""
    now = now or timezone.now()
    _check_may_act(alert, actor)
    if alert.action_state != ActionState.SUSPENDED or not alert.is_open:
        raise Conflict(
            "Only a suspended workload can be reactivated.",
            fields={"action_state": [f"is {alert.action_state or 'none'}"]},
        )
    assert alert.cluster is not None
    try:
        workload_set_active(
            cluster=alert.cluster,
            namespace=alert.workload_namespace,
            name=alert.workload_name,
            active=True,
        )
    except ApplyError as exc:
        raise Conflict(f"The cluster could not reactivate the workload: {exc.message}") from exc
    with transaction.atomic():
        done = Alert.objects.filter(
            pk=alert.pk, state__in=OPEN_STATES, action_state=ActionState.SUSPENDED
        ).update(action_state=ActionState.UNDONE)
        if not done:
            raise Conflict("The alert changed meanwhile; reload it.")
        workload = f"{alert.workload_namespace}/{alert.workload_name}"
        _event(alert, EventKind.REACTIVATED, now, actor=actor, detail={"workload": workload})
        audit_record(
            actor=actor, action="workload.reactivated", obj=alert, tenant=alert.tenant,
            object_id=workload, before={"active": False}, after={"active": True, "alert": alert.pk},
        )  # fmt: skip
        alert.refresh_from_db()
        _notify(alert, EventKind.REACTIVATED,
                f"{workload} was reactivated by {actor.get_username()}", alert.message)  # fmt: skip
    return alert


def alert_acknowledge(*, alert: Alert, actor: User, now: datetime | None = None) -> Alert:
    """Firing -> acknowledged (who, when). 409 when it is already acknowledged or resolved."""
    now = now or timezone.now()
    _check_may_act(alert, actor)
    with transaction.atomic():
        done = Alert.objects.filter(pk=alert.pk, state=AlertState.FIRING).update(
            state=AlertState.ACKNOWLEDGED, acknowledged_at=now, acknowledged_by=actor
        )
        if not done:
            raise Conflict(
                "Only a firing alert can be acknowledged.",
                fields={"state": [f"is {Alert.objects.get(pk=alert.pk).state}"]},
            )
        _event(alert, EventKind.ACKNOWLEDGED, now, actor=actor)
        audit_record(actor=actor, action="alert.acknowledged", obj=alert, tenant=alert.tenant,
                     object_id=f"{alert.rule.name} {alert.subject}")  # fmt: skip
    alert.refresh_from_db()
    return alert
