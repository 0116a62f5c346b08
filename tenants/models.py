"""Who: users, tenants (teams) and their hierarchy, namespaces, memberships, API tokens, audit."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models import F, Q

from tenants.choices import (
    AuditSource,
    EmailState,
    IsolationLevel,
    JoinRequestState,
    MembershipRole,
    NamespacePurpose,
    Priority,
    TenantState,
)
from tenants.validators import (
    DNS1123_LABEL_MAX,
    DNS1123_LABEL_REGEX,
    TENANT_SLUG_MAX,
    dns1123_label,
)

MEMBERSHIP_SOURCE_MANUAL = "manual"
GROUP_SOURCE_PREFIX = "group:"


class User(AbstractUser):
    """A person or automation account. Platform admins approve quotas and manage tenants."""

    is_platform_admin = models.BooleanField(
        default=False, help_text="May manage every tenant, approve requests and see all data."
    )
    # Where ``is_platform_admin`` came from: empty (granted by hand, or not an admin) or
    # ``group:<name>`` (an identity-provider group; brought in line at each sign-in).
    platform_admin_source = models.CharField(max_length=210, blank=True, default="")


class TenantQuerySet(models.QuerySet["Tenant"]):
    def visible_to(self, user: User) -> TenantQuerySet:
        """The one tenant-scoping chokepoint: admins see all, others their memberships."""
        if not user.is_authenticated:
            return self.none()
        if user.is_platform_admin:
            return self
        return self.filter(memberships__user=user)

    def not_archived(self) -> TenantQuerySet:
        return self.filter(archived_at__isnull=True)


class Tenant(models.Model):
    slug = models.CharField(max_length=TENANT_SLUG_MAX, unique=True, validators=[dns1123_label])
    display_name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    cohort = models.CharField(
        max_length=DNS1123_LABEL_MAX,
        blank=True,
        validators=[dns1123_label],
        help_text="Kueue cohort it borrows from and lends to; empty means the cluster's default.",
    )
    default_priority = models.CharField(
        max_length=20, choices=Priority.choices, default=Priority.DEFAULT
    )
    state = models.CharField(max_length=20, choices=TenantState.choices, default=TenantState.ACTIVE)
    # R23: set through a request (approvals), never by a direct edit outside Django admin.
    isolation_level = models.CharField(
        max_length=20,
        choices=IsolationLevel.choices,
        default=IsolationLevel.WHOLE_GPU,
        help_text="Which flavors its quotas may be on; changed through a request.",
    )
    # Archived: a team that no longer works here. It keeps its history (quotas, requests,
    # usage, audit) and its page; it is left out of lists, gets no new quotas and no pushes,
    # and identity groups mapped to it are ignored. Set and cleared through the services.
    archived_at = models.DateTimeField(null=True, blank=True, editable=False)
    # R15: whether its pods may run at the production priority (and so preempt others' work).
    # Without it every namespace holds a ResourceQuota of 0 pods for that PriorityClass.
    # Granted through a request a platform admin approves.
    production_priority_allowed = models.BooleanField(
        default=False,
        help_text="May its pods use the production priority class; changed through a request.",
    )
    # Set through a request (approvals), never by a direct edit outside Django admin.
    max_run_time_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Hours a workload of this tenant may run before it is suspended (after the "
        "maximum run time rule's grace); empty: the platform's rule. Changed through a request.",
    )
    gpu_unit_cap = models.DecimalField(
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        help_text="The most normalised GPU units (each GPU's limit times its model's weight) "
        "its limits may add up to over every cluster; empty: no cap. Changed through a request.",
    )
    # R27: the most bits per second each of its pods may send and receive, a Kubernetes
    # quantity in canonical form ("1G"); empty: no cap. Set through a request (approvals); the
    # compiler labels its namespaces and an admission policy holds pods to it.
    pod_bandwidth_max = models.CharField(
        max_length=20,
        blank=True,
        default="",
        help_text="Most bits per second each pod may send and receive (a quantity such as 1G); "
        "empty: no cap. Changed through a request.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(slug__regex=DNS1123_LABEL_REGEX), name="tenant_slug_dns1123"
            ),
            models.CheckConstraint(
                condition=Q(cohort="") | Q(cohort__regex=DNS1123_LABEL_REGEX),
                name="tenant_cohort_dns1123",
            ),
            models.CheckConstraint(condition=~Q(parent=F("pk")), name="tenant_not_own_parent"),
            models.CheckConstraint(
                condition=Q(isolation_level__in=IsolationLevel.values),
                name="tenant_isolation_level_valid",
            ),
            models.CheckConstraint(
                condition=Q(max_run_time_hours__isnull=True) | Q(max_run_time_hours__gte=1),
                name="tenant_max_run_time_positive",
            ),
            models.CheckConstraint(
                condition=Q(gpu_unit_cap__isnull=True) | Q(gpu_unit_cap__gt=0),
                name="tenant_gpu_unit_cap_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Namespace(models.Model):
    """A Kubernetes namespace a tenant owns; its quota is locked on it (R1)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="namespaces")
    name = models.CharField(max_length=DNS1123_LABEL_MAX, unique=True, validators=[dns1123_label])
    purpose = models.CharField(
        max_length=20, choices=NamespacePurpose.choices, default=NamespacePurpose.GENERAL
    )
    # Percentage of the tenant's limit this namespace's ResourceQuota holds where a cluster
    # splits limits across namespaces; null on every namespace of a tenant: an even split.
    quota_share = models.DecimalField(max_digits=5, decimal_places=2, null=True, blank=True)
    # Set when a platform admin adopts a namespace that already existed on a cluster without
    # the portal's labels (``services.namespace_adopt``): until then the push leaves such a
    # namespace alone rather than take it over silently. Audited.
    adopted_at = models.DateTimeField(null=True, blank=True, editable=False)
    adopted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_LABEL_REGEX), name="namespace_name_dns1123"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=MembershipRole.choices)
    # Where the membership came from: ``manual`` (granted by hand: stays whatever the identity
    # provider says) or ``group:<name>`` (an identity-provider group: brought in line with the
    # user's groups at each sign-in).
    source = models.CharField(max_length=210, default=MEMBERSHIP_SOURCE_MANUAL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "tenant"], name="membership_unique_user_tenant"
            ),
            models.CheckConstraint(
                condition=Q(role__in=MembershipRole.values), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.tenant}"


JOIN_REQUEST_MESSAGE_MAX = 1000
JOIN_REQUEST_REASON_MAX = 1000


class JoinRequest(models.Model):
    """A signed-in person's ask to join a tenant. Its leads (or, without one, the platform
    admins) are told and approve it (a membership with the member role) or refuse it; the
    person may withdraw it while it waits. One open ask per person and tenant. Written only by
    ``tenants.services`` (audited)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="join_requests")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="join_requests"
    )
    message = models.TextField(blank=True, default="", db_default="")
    state = models.CharField(
        max_length=20,
        choices=JoinRequestState.choices,
        default=JoinRequestState.OPEN,
        db_default=JoinRequestState.OPEN,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    reason = models.TextField(
        blank=True, default="", db_default="", help_text="Why it was refused or approved."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user"],
                condition=Q(state="open"),
                name="join_request_one_open_per_person",
            ),
            models.CheckConstraint(
                condition=Q(state__in=JoinRequestState.values), name="join_request_state_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "created_at"],
                name="join_request_open_idx",
                condition=Q(state="open"),
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} asks to join {self.tenant} ({self.state})"


class ApiToken(models.Model):
    """A bearer token for automation. Only a SHA-256 digest of the secret is stored."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=12, db_index=True, help_text="First characters, shown.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class AuditEvent(models.Model):
    """Append-only record of a state change. Lives in the lowest app so every service can write it."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=100)
    object_type = models.CharField(max_length=100)
    object_id = models.CharField(max_length=200)
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    tenant_slug = models.CharField(max_length=TENANT_SLUG_MAX, blank=True)
    source = models.CharField(
        max_length=10, choices=AuditSource.choices, default=AuditSource.SYSTEM
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"])]

    def __str__(self) -> str:
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_username} {self.action} {self.object_id}"
        )


class Notification(models.Model):
    """A message for one user: shown in the portal's inbox and sent by email (in Celery,
    after commit; a failing mail server delays it, never the change itself). The row is the
    email's outbox: pending until sent, retried with backoff after any failure (due at
    ``email_next_attempt_at``), and swept every minute, so an email made while the broker
    was down is sent all the same; after the last attempt it is failed, its error kept."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=500, blank=True, help_text="Portal page it is about.")
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)
    emailed_at = models.DateTimeField(null=True, blank=True)
    email_attempts = models.PositiveSmallIntegerField(default=0)
    # Database defaults too: the previous release inserts rows without these while both run.
    email_state = models.CharField(
        max_length=20,
        choices=EmailState.choices,
        default=EmailState.PENDING,
        db_default=EmailState.PENDING,
    )
    email_next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="When a pending email is due again (after a failure)."
    )
    email_error = models.CharField(
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text="The last failure of its email.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["created_at"],
                name="notification_email_pending_idx",
                condition=Q(email_state="pending"),
            ),
            models.Index(
                fields=["user", "-created_at"],
                name="notification_unread_idx",
                condition=Q(read_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user}: {self.subject}"


class NamespaceReservation(models.Model):
    """A namespace name (or the start of one, ending in ``*``) no tenant may have, beside the
    built-in system ones (``tenants.namespaces``), and why in words. Written only by
    ``tenants.services.namespace_reservations_set``, one set of rows per ``source``: the quotas
    app writes ``cluster:<id>`` with what that cluster keeps for itself (its
    ``reserved_namespaces``, the namespace its Kueue configuration names, its GPU Operator's
    namespace) whenever one of them changes, and clears it when the cluster is deleted."""

    source = models.CharField(max_length=100, help_text='Who reserves it, as "cluster:<id>".')
    pattern = models.CharField(
        max_length=253, help_text="A namespace name, or the start of one ending in *."
    )
    reason = models.CharField(max_length=500, help_text="Why, in words.")
    # The order the source gave its rules in: the first that matches gives the reason.
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["source", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "pattern"], name="namespace_reservation_source_pattern"
            )
        ]

    def __str__(self) -> str:
        return f"{self.pattern} ({self.source})"
