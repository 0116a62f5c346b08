"""A request's statuses and which may follow which; approvers' decisions."""

from django.db import models


class RequestStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    PENDING = "pending", "Pending approval"
    APPROVED = "approved", "Approved"
    APPLYING = "applying", "Applying"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


# Which status may follow which. Only services change status, with a conditional update.
TRANSITIONS: dict[str, frozenset[str]] = {
    RequestStatus.DRAFT: frozenset({RequestStatus.PENDING, RequestStatus.CANCELLED}),
    RequestStatus.PENDING: frozenset(
        {RequestStatus.APPROVED, RequestStatus.REJECTED, RequestStatus.CANCELLED,
         RequestStatus.EXPIRED}
    ),
    RequestStatus.APPROVED: frozenset({RequestStatus.APPLYING, RequestStatus.APPLIED,
                                       RequestStatus.FAILED}),
    RequestStatus.APPLYING: frozenset({RequestStatus.APPLIED, RequestStatus.FAILED}),
    RequestStatus.FAILED: frozenset({RequestStatus.APPLYING, RequestStatus.APPLIED}),
    RequestStatus.APPLIED: frozenset(),
    RequestStatus.REJECTED: frozenset(),
    RequestStatus.CANCELLED: frozenset(),
    RequestStatus.EXPIRED: frozenset(),
}  # fmt: skip

OPEN_STATUSES = (RequestStatus.DRAFT, RequestStatus.PENDING)
# A request in one of these moves on its own (the push takes it to applied or failed); in any
# other it stays as it is until someone acts.
PUSH_UNDER_WAY_STATUSES = (RequestStatus.APPROVED, RequestStatus.APPLYING)


class DecisionKind(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
