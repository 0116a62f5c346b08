"""Per-person caps inside a tenant (R14, the user level): a lead caps a member or the team's
pipeline account, a platform admin sets the default every other member gets. Each write is
checked line by line (a 400 naming ``caps[i].<field>``, nothing written), audited, and pushed
to the clusters it touches like any quota change (the next generation and an outbox row);
the cluster enforces it (``quotas.kube.person_caps``)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction

from core.errors import PermissionDenied, ValidationFailed
from quotas.choices import GPUCORES_RESOURCE, GPUMEM_RESOURCE, CapSubject
from quotas.models import PersonCap, Quota, QuotaSet, ResourceFlavor
from quotas.quantity import QuantityError, format_quantity, parse_resource_amount
from quotas.services.outbox import quota_set_repush
from quotas.services.vgpu_amounts import vgpu_amount_parse
from tenants.models import Membership, Tenant, User
from tenants.services import audit_record, team_ensure_can_manage


@dataclass(frozen=True)
class CapLine:
    """One checked line: set ``amount`` (None: remove the cap) on ``flavor``/``resource``."""

    flavor: ResourceFlavor
    resource: str
    amount: Decimal | None


def _field(index: int, name: str) -> str:
    return f"caps[{index}].{name}"


def _check_actor(*, actor: User, tenant: Tenant, subject: str) -> None:
    if subject == CapSubject.DEFAULT:
        if not actor.is_platform_admin:
            raise PermissionDenied(
                "Only a platform admin sets the default cap every member of a tenant gets."
            )
        return
    team_ensure_can_manage(actor=actor, tenant=tenant)


def _check_lines(*, tenant: Tenant, caps: list[dict[str, Any]]) -> list[CapLine]:
    """Each line in turn: a flavor of a cluster the tenant has a quota on, a resource its
    quota covers there, a whole (or, for cpu, millicore) amount not above its limit."""
    limits = {
        (q.flavor_id, q.resource): q
        for q in Quota.objects.filter(quota_set__tenant=tenant).select_related(
            "flavor__cluster", "quota_set"
        )
    }
    flavors = {
        (f.cluster.name, f.name): f
        for f in ResourceFlavor.objects.filter(quotas__quota_set__tenant=tenant)
        .select_related("cluster")
        .distinct()
    }
    lines: list[CapLine] = []
    seen: set[tuple[int, str]] = set()
    for index, line in enumerate(caps):
        key = (str(line.get("cluster") or ""), str(line.get("flavor") or ""))
        flavor = flavors.get(key)
        if flavor is None:
            raise ValidationFailed.for_field(
                _field(index, "flavor"),
                f"{tenant.slug} has no quota on flavor {key[1]!r} of cluster {key[0]!r}; a cap "
                "is a part of the tenant's quota.",
            )
        resource = str(line.get("resource") or "")
        quota = limits.get((flavor.pk, resource))
        if quota is None:
            covered = sorted(r for (f, r) in limits if f == flavor.pk)
            raise ValidationFailed.for_field(
                _field(index, "resource"),
                f"{tenant.slug}'s quota on {flavor.name} covers {', '.join(covered) or 'nothing'}"
                f", not {resource!r}.",
            )
        if (flavor.pk, resource) in seen:
            raise ValidationFailed.for_field(
                _field(index, "resource"), f"{flavor.name} {resource} is listed twice."
            )
        seen.add((flavor.pk, resource))
        raw = line.get("amount")
        amount = None if raw is None else _amount(index, resource, raw, quota)
        lines.append(CapLine(flavor, resource, amount))
    return lines


def _amount(index: int, resource: str, raw: object, quota: Quota) -> Decimal:
    if resource in (GPUMEM_RESOURCE, GPUCORES_RESOURCE):  # GiB / percent, as on requests
        amount = vgpu_amount_parse(resource, raw, field=_field(index, "amount"))
    else:
        try:
            amount = parse_resource_amount(resource, str(raw).strip())
        except QuantityError as exc:
            raise ValidationFailed.for_field(_field(index, "amount"), f"{exc}.") from None
    if amount > quota.limit:
        limit = format_quantity(quota.limit, resource)
        raise ValidationFailed.for_field(
            _field(index, "amount"),
            f"{format_quantity(amount, resource)} is above the tenant's limit of {limit} "
            f"{resource} on {quota.flavor.name}: a person's cap is a part of it.",
        )
    return amount


@transaction.atomic
def person_caps_set(
    *,
    tenant: Tenant,
    subject: str,
    caps: list[dict[str, Any]],
    actor: User,
    membership: Membership | None = None,
) -> list[PersonCap]:
    """Set (or, with amount None, remove) the given cap lines of one subject: a member
    (``membership``), the pipeline account or the tenant's default. Lines not named stay as
    they are. Returns the subject's caps after the change."""
    if subject not in CapSubject.values:
        raise ValidationFailed.for_field("subject", f"Unknown subject {subject!r}.")
    if (subject == CapSubject.MEMBER) != (membership is not None):
        raise ValidationFailed.for_field("subject", "A member's cap names the member.")
    _check_actor(actor=actor, tenant=tenant, subject=subject)
    lines = _check_lines(tenant=tenant, caps=caps)
    owner = {"tenant": tenant, "subject": subject, "membership": membership}
    current = {(c.flavor_id, c.resource): c for c in PersonCap.objects.filter(**owner)}
    before = {_words(c.flavor, c.resource): str(c.amount) for c in current.values()}
    for line in lines:
        row = current.get((line.flavor.pk, line.resource))
        if line.amount is None:
            if row is not None:
                row.delete()
        elif row is None:
            PersonCap.objects.create(
                **owner, flavor=line.flavor, resource=line.resource, amount=line.amount
            )
        elif row.amount != line.amount:
            row.amount = line.amount
            row.save(update_fields=["amount", "updated_at"])
    after_rows = list(PersonCap.objects.filter(**owner).select_related("flavor__cluster"))
    after = {_words(c.flavor, c.resource): str(c.amount) for c in after_rows}
    if before != after:
        who = membership.user.username if membership is not None else subject
        audit_record(
            actor=actor,
            action="person_cap.set",
            obj=tenant,
            object_id=f"{who}@{tenant.slug}",
            tenant=tenant,
            before={"subject": subject, "who": who, "caps": before},
            after={"subject": subject, "who": who, "caps": after},
        )
        clusters = {line.flavor.cluster_id for line in lines}
        for quota_set in QuotaSet.objects.select_for_update().filter(
            tenant=tenant, cluster_id__in=clusters
        ):
            quota_set_repush(quota_set)
    return after_rows


def _words(flavor: ResourceFlavor, resource: str) -> str:
    return f"{flavor.cluster.name}/{flavor.name} {resource}"
