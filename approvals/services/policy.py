"""The approval policy: when a request needs two approvers, and when a pending one expires
(one row, changed in the Django admin, audited)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction

from approvals.models import ApprovalPolicy
from core.errors import (
    ValidationFailed,
)
from tenants.models import User
from tenants.services import (
    audit_record,
)


def approval_policy() -> ApprovalPolicy:
    policy, _ = ApprovalPolicy.objects.get_or_create(pk=1)
    return policy


POLICY_FIELDS = (
    "two_approvers_above_gpu_units",
    "two_approvers_above_capacity_fraction",
    "pending_expires_after_days",
    "grant_max_days",
    "grant_end_notice_days",
)


def _policy_snapshot(policy: ApprovalPolicy) -> dict[str, Any]:
    return {name: str(getattr(policy, name)) for name in POLICY_FIELDS}


@transaction.atomic
def approval_policy_update(*, actor: User | None, **fields: Any) -> ApprovalPolicy:
    """Change the approval policy (Django admin), audited. Applies to requests submitted from
    now on; pending ones keep the number of approvals they were filed with."""
    unknown = set(fields) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationFailed.for_field(sorted(unknown)[0], "not an approval policy field")
    approval_policy()
    policy = ApprovalPolicy.objects.select_for_update().get(pk=1)
    before = _policy_snapshot(policy)
    for name, value in fields.items():
        setattr(policy, name, value)
    try:
        policy.full_clean()
    except DjangoValidationError as exc:
        errors = {name: [str(m) for m in messages] for name, messages in exc.message_dict.items()}
        raise ValidationFailed(next(iter(errors.values()))[0], fields=errors) from exc
    policy.save()
    after = _policy_snapshot(policy)
    if after != before:
        audit_record(
            actor=actor,
            action="approval_policy.updated",
            obj=policy,
            object_id="approval-policy",
            before=before,
            after=after,
        )
    return policy
