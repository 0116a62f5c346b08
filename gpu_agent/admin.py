"""Django admin for the GPU fleet. What agents report is read-only here; desired layouts change
through the API (validated, audited); tokens show their prefix only and are revoked by an
action that calls the service."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin_actions import delete_each, delete_selected
from core.words import counted
from gpu_agent.models import Gpu, MigInstance, MigLayout, Node, NodeJoinToken, NodeToken
from gpu_agent.services.nodes import node_remove, node_token_revoke, node_update


class ReadOnlyAdmin(admin.ModelAdmin):
    """Observed or service-written data: shown, never edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields or []


class GpuInline(ReadOnlyInline):
    model = Gpu
    fields = ["index", "uuid", "name", "mig_mode_current", "memory_used_mib", "last_seen_at"]


class NodeTokenInline(ReadOnlyInline):
    model = NodeToken
    fields = ["prefix", "created_at", "last_used_at", "revoked_at"]
    show_change_link = False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "cluster",
        "hostname",
        "agent_version",
        "report_protocol",
        "driver_version",
        "last_report_at",
        "stale",
    ]
    list_filter = ["stale", "cluster", "report_protocol"]
    search_fields = ["name", "hostname"]
    # Only the cluster is an admin's to set; the rest comes from the agent, or (cluster_*)
    # from the cluster's own Node object, read every minute.
    readonly_fields = [
        "name",
        "hostname",
        "agent_version",
        "report_protocol",
        "report_session",
        "report_seq",
        "report_digest",
        "driver_version",
        "last_report_at",
        "stale",
        "cluster_seen_at",
        "cluster_gpus",
        "cluster_gpu_product",
        "cluster_mig",
        "created_at",
    ]
    inlines = [GpuInline, NodeTokenInline]
    actions = [delete_selected, "revoke_tokens"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # nodes appear when their agent registers with a join token

    # Removing a node goes through the service (refused while its agent reports, audited, its
    # capacity pushed away), one at a time or in bulk.
    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        node_remove(node=obj, actor=request.user)  # type: ignore[arg-type]  # admin users are Users

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        delete_each(
            self,
            request,
            queryset,
            remove=lambda node: node_remove(node=node, actor=request.user),  # type: ignore[arg-type]  # admin users are Users
        )

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        node_update(node=obj, actor=request.user, cluster=obj.cluster)  # type: ignore[arg-type]  # admin users are Users

    @admin.action(description="Revoke the selected nodes' tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        total = 0
        for node in queryset:
            total += node_token_revoke(node=node, actor=request.user)  # type: ignore[arg-type]  # admin users are Users
        self.message_user(request, f"{counted(total, 'token')} revoked.", messages.SUCCESS)


class MigInstanceInline(ReadOnlyInline):
    model = MigInstance
    fields = ["gi_id", "profile", "start", "size", "busy", "memory_used_mib", "processes"]
    show_change_link = False


@admin.register(Gpu)
class GpuAdmin(ReadOnlyAdmin):
    list_display = [
        "uuid",
        "node",
        "index",
        "name",
        "mig_mode_current",
        "utilization_pct",
        "memory_used_mib",
        "last_seen_at",
    ]
    list_filter = ["mig_mode_current", "name"]
    search_fields = ["uuid", "node__name", "name"]
    list_select_related = ["node"]
    inlines = [MigInstanceInline]


@admin.register(MigInstance)
class MigInstanceAdmin(ReadOnlyAdmin):
    list_display = ["gpu", "gi_id", "profile", "start", "size", "busy", "tenant", "observed_at"]
    list_filter = ["busy", "profile"]
    search_fields = ["gpu__uuid", "gpu__node__name"]
    list_select_related = ["gpu", "tenant"]


@admin.register(MigLayout)
class MigLayoutAdmin(ReadOnlyAdmin):
    list_display = [
        "gpu",
        "generation",
        "state",
        "mig_enabled",
        "requested_by",
        "created_at",
        "deadline",
        "applied_at",
    ]
    list_filter = ["state"]
    search_fields = ["gpu__uuid", "gpu__node__name", "message"]
    list_select_related = ["gpu", "requested_by"]


@admin.register(NodeJoinToken)
class NodeJoinTokenAdmin(ReadOnlyAdmin):
    """Join tokens are issued by POST /api/v1/nodes/join-tokens/ (the secret is shown once)."""

    list_display = ["prefix", "node_name", "cluster", "created_by", "expires_at", "used_at"]
    search_fields = ["prefix", "node_name"]
    exclude = ["digest"]
    list_select_related = ["cluster", "created_by"]


@admin.register(NodeToken)
class NodeTokenAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "node", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "node__name"]
    exclude = ["digest"]
    list_select_related = ["node"]
    actions = ["revoke"]

    @admin.action(description="Revoke all tokens of the selected tokens' nodes")
    def revoke(self, request: HttpRequest, queryset: QuerySet[NodeToken]) -> None:
        nodes = {token.node_id: token.node for token in queryset.select_related("node")}
        total = 0
        for node in nodes.values():
            total += node_token_revoke(node=node, actor=request.user)  # type: ignore[arg-type]  # admin users are Users
        self.message_user(request, f"{counted(total, 'token')} revoked.", messages.SUCCESS)
