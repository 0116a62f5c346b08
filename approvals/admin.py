"""Django admin for change requests: read-only pages, with "approve" and "reject" actions that
call the same services as the API and the portal. Nothing here is deletable; the approval
policy is editable, and its changes are audited."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from approvals import services
from approvals.choices import RequestStatus
from approvals.models import ApprovalDecision, ApprovalPolicy, QuotaChangeItem, QuotaChangeRequest
from core.errors import ApplicationError
from core.words import counted
from quotas.quantity import format_quantity


class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class QuotaChangeItemInline(_ReadOnlyInline):
    model = QuotaChangeItem
    fields = readonly_fields = ("flavor", "resource", "guaranteed", "limit", "lending_limit")


class ApprovalDecisionInline(_ReadOnlyInline):
    model = ApprovalDecision
    fields = readonly_fields = ("approver", "decision", "comment", "created_at")


Decide = Callable[..., QuotaChangeRequest]


@admin.register(QuotaChangeRequest)
class QuotaChangeRequestAdmin(admin.ModelAdmin):
    """Read-only: requests change only through the services (the actions below)."""

    list_display = [
        "id",
        "tenant",
        "cluster",
        "status",
        "requester",
        "required_approvals",
        "needs_revalidation",
        "submitted_at",
        "created_at",
    ]
    list_filter = ["status", "cluster", "source", "needs_revalidation"]
    search_fields = ["tenant__slug", "requester__username", "reason"]
    list_select_related = ["tenant", "cluster", "requester"]
    readonly_fields = [
        *(f.name for f in QuotaChangeRequest._meta.concrete_fields if f.name != "id"),
        "diff",
    ]
    inlines = [QuotaChangeItemInline, ApprovalDecisionInline]
    actions = ["approve", "reject"]

    def has_add_permission(self, request: Any) -> bool:
        return False  # leads file requests in the portal or through the API

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_decide_permission(self, request: Any) -> bool:
        return bool(getattr(request.user, "is_platform_admin", False))

    @admin.display(description="Diff against the quotas in force")
    def diff(self, obj: QuotaChangeRequest) -> str:
        check = services.quota_request_check_stored(request=obj)
        lines = format_html_join(
            "",
            "<li>{} {}: {}/{} -> {}/{}</li>",
            (
                (
                    d.flavor,
                    d.resource,
                    format_quantity(d.guaranteed_before, d.resource),
                    format_quantity(d.limit_before, d.resource),
                    format_quantity(d.guaranteed_after, d.resource),
                    format_quantity(d.limit_after, d.resource),
                )
                for d in check.diff
            ),
        )
        if not check.errors:
            return format_html("<ul>{}</ul>", lines)
        problems = format_html_join(
            "", "<li>{}: {}</li>", ((k, "; ".join(v)) for k, v in check.errors.items())
        )
        return format_html("<ul>{}</ul><p>Breaks now:</p><ul>{}</ul>", lines, problems)

    @admin.action(description="Approve selected requests", permissions=["decide"])
    def approve(self, request: Any, queryset: Any) -> None:
        self._decide(request, queryset, services.quota_request_approve, "approved")

    @admin.action(description="Reject selected requests", permissions=["decide"])
    def reject(self, request: Any, queryset: Any) -> None:
        self._decide(request, queryset, services.quota_request_reject, "rejected")

    def _decide(self, request: Any, queryset: Any, decide: Decide, word: str) -> None:
        done = 0
        for quota_request in queryset.select_related("tenant").order_by("pk"):
            try:
                decided = decide(request=quota_request, approver=request.user)
            except ApplicationError as exc:
                self.message_user(
                    request, f"Request #{quota_request.pk}: {exc.message}", level=messages.ERROR
                )
                continue
            if decided.status == RequestStatus.PENDING:
                self.message_user(
                    request,
                    f"Request #{decided.pk}: approval recorded; it needs "
                    f"{decided.required_approvals} distinct approvers.",
                    level=messages.INFO,
                )
                continue
            done += 1
        if done:
            self.message_user(
                request, f"{counted(done, 'request')} {word}.", level=messages.SUCCESS
            )


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(admin.ModelAdmin):
    list_display = ["__str__", *services.POLICY_FIELDS, "updated_at"]
    fields = list(services.POLICY_FIELDS)

    def has_add_permission(self, request: Any) -> bool:
        return not ApprovalPolicy.objects.exists()  # one row

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def save_model(self, request: Any, obj: ApprovalPolicy, form: Any, change: bool) -> None:
        saved = services.approval_policy_update(
            actor=request.user, **{name: form.cleaned_data[name] for name in services.POLICY_FIELDS}
        )
        obj.pk = saved.pk
