from django.db import models


class TenantState(models.TextChoices):
    ACTIVE = "active", "Active"
    SUSPENDED = "suspended", "Suspended"


class MembershipRole(models.TextChoices):
    LEAD = "lead", "Lead"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class Priority(models.TextChoices):
    """The PriorityClass ladder a tenant's workloads default to (R15)."""

    PRODUCTION = "production", "Production inference (high)"
    DEFAULT = "default", "Default"
    EXPERIMENT = "experiment", "Experiments (low)"


class NamespacePurpose(models.TextChoices):
    GENERAL = "general", "General"
    TRAINING = "training", "Training"
    INFERENCE = "inference", "Inference"


class AuditSource(models.TextChoices):
    """Where a change came from."""

    PORTAL = "portal", "Portal"
    API = "api", "REST API"
    ADMIN = "admin", "Django admin"
    SYSTEM = "system", "System"


class IsolationLevel(models.TextChoices):
    """How far a tenant's work is kept apart from other tenants' (R23): the seed's five options,
    each with its fault, performance and security isolation (``quotas.isolation``). It decides
    which flavors the tenant's quotas may be on; set through a request."""

    NAMESPACE = "namespace", "Namespace and cgroup sharing"
    TIME_SLICED = "time-sliced", "Time-sliced GPU share"
    MIG = "mig", "MIG instance"
    WHOLE_GPU = "whole-gpu", "Whole GPU"
    DEDICATED = "dedicated", "Dedicated nodes"


class EmailState(models.TextChoices):
    """Where a notification's email is: waiting to be sent (or sent again, after a failure),
    sent, given up (the last error kept on the row), or none to send (no address)."""

    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    NO_ADDRESS = "no-address", "No address"


class JoinRequestState(models.TextChoices):
    """Where a person's ask to join a tenant is: waiting for a lead, approved (a member now),
    refused, or withdrawn by the person who asked."""

    OPEN = "open", "Waiting for a lead"
    APPROVED = "approved", "Approved"
    REFUSED = "refused", "Refused"
    WITHDRAWN = "withdrawn", "Withdrawn"
