"""Django admin for tenants. Writes that have business rules go through services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin

from core.admin_actions import delete_each, delete_selected
from core.errors import ApplicationError, PermissionDenied
from tenants import services
from tenants.models import ApiToken, AuditEvent, Membership, Namespace, Tenant, User


@admin.register(User)
class PortalUserAdmin(UserAdmin):
    list_display = ["username", "email", "is_platform_admin", "is_staff", "is_active"]
    list_filter = ["is_platform_admin", "is_staff", "is_active"]
    fieldsets = [*(UserAdmin.fieldsets or ()), ("Portal", {"fields": ["is_platform_admin"]})]


class NamespaceInline(admin.TabularInline):
    model = Namespace
    extra = 0
    readonly_fields = ["name", "purpose", "created_at"]
    can_delete = False

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    readonly_fields = ["user", "role", "created_at"]
    can_delete = False

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class ArchivedFilter(admin.SimpleListFilter):
    """Tenants in use by default; archived ones, or all, when asked."""

    title = "archived"
    parameter_name = "archived"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Archived"), ("all", "All")]

    def choices(self, changelist: Any) -> Any:
        value = self.value()
        yield {
            "selected": value is None,
            "query_string": changelist.get_query_string(remove=[self.parameter_name]),
            "display": "In use",
        }
        for lookup, title in self.lookup_choices:
            yield {
                "selected": value == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: Any, queryset: Any) -> Any:
        value = self.value()
        if value == "all":
            return queryset
        return queryset.filter(archived_at__isnull=value != "yes")


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = [
        "slug", "display_name", "parent", "cohort", "state", "isolation_level", "archived_at",
        "created_at",
    ]  # fmt: skip
    list_filter = [ArchivedFilter, "state", "default_priority", "isolation_level"]
    search_fields = ["slug", "display_name"]
    inlines = [NamespaceInline, MembershipInline]
    actions = ["archive", "unarchive"]

    # A tenant is archived (its quotas, requests, usage and audit trail stay), never deleted:
    # no service deletes one, so neither does Django admin, one at a time or in bulk.
    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: Any, obj: Tenant) -> None:
        raise PermissionDenied("Tenants are archived, never deleted.")

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        raise PermissionDenied("Tenants are archived, never deleted.")

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        # The slug names namespaces and cluster objects: fixed once created. The isolation
        # level, the production priority, the maximum run time and the cap over every cluster
        # change only through a request, checked against the tenant's quotas and pushed to
        # every cluster (the per-pod bandwidth cap too, R27). Archiving goes through the
        # actions (audited, checked).
        by_request = [
            "isolation_level", "production_priority_allowed", "max_run_time_hours", "gpu_unit_cap",
            "pod_bandwidth_max",
        ]  # fmt: skip
        if obj:
            return [
                "slug",
                "parent",
                "cohort",
                *by_request,
                "archived_at",
                "created_at",
                "updated_at",
            ]
        return by_request

    def _each(self, request: Any, queryset: Any, service: Any, done: str) -> None:
        def depth(tenant: Tenant) -> int:
            level, parent = 0, tenant.parent
            while parent is not None:
                level, parent = level + 1, parent.parent
            return level

        # Teams before their department when archiving, departments first when unarchiving.
        tenants = sorted(queryset, key=depth, reverse=done == "archived")
        changed = []
        for tenant in tenants:
            try:
                service(tenant=tenant, actor=request.user)
            except ApplicationError as exc:
                self.message_user(request, exc.message, level=messages.ERROR)
            else:
                changed.append(tenant.slug)
        if changed:
            self.message_user(
                request, f"{done.capitalize()}: {', '.join(changed)}.", level=messages.SUCCESS
            )

    @admin.action(description="Archive selected tenants")
    def archive(self, request: Any, queryset: Any) -> None:
        self._each(request, queryset, services.tenant_archive, "archived")

    @admin.action(description="Unarchive selected tenants")
    def unarchive(self, request: Any, queryset: Any) -> None:
        self._each(request, queryset, services.tenant_unarchive, "unarchived")

    def save_model(self, request: Any, obj: Tenant, form: Any, change: bool) -> None:
        if change:
            services.tenant_update(
                tenant=obj,
                actor=request.user,
                display_name=obj.display_name,
                description=obj.description,
                state=obj.state,
                default_priority=obj.default_priority,
            )
        else:
            created = services.tenant_create(
                slug=obj.slug,
                display_name=obj.display_name,
                description=obj.description,
                parent=obj.parent,
                cohort=obj.cohort,
                default_priority=obj.default_priority,
                actor=request.user,
            )
            obj.pk = created.pk


@admin.register(Namespace)
class NamespaceAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "purpose", "created_at"]
    list_filter = ["purpose"]
    search_fields = ["name", "tenant__slug"]
    actions = [delete_selected]

    def delete_model(self, request: Any, obj: Namespace) -> None:
        services.namespace_remove(tenant=obj.tenant, name=obj.name, actor=request.user)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        delete_each(
            self,
            request,
            queryset.select_related("tenant").order_by("tenant", "name"),
            remove=lambda namespace: services.namespace_remove(
                tenant=namespace.tenant, name=namespace.name, actor=request.user
            ),
        )

    def save_model(self, request: Any, obj: Namespace, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
        else:
            obj.pk = services.namespace_create(
                tenant=obj.tenant, name=obj.name, purpose=obj.purpose, actor=request.user
            ).pk


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["tenant", "user", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["tenant__slug", "user__username"]
    actions = [delete_selected]

    def save_model(self, request: Any, obj: Membership, form: Any, change: bool) -> None:
        obj.pk = services.membership_set(
            tenant=obj.tenant, user=obj.user, role=obj.role, actor=request.user
        ).pk

    def delete_model(self, request: Any, obj: Membership) -> None:
        services.membership_remove(tenant=obj.tenant, user=obj.user, actor=request.user)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        delete_each(
            self,
            request,
            queryset.select_related("tenant", "user").order_by("tenant", "user__username"),
            remove=lambda membership: services.membership_remove(
                tenant=membership.tenant, user=membership.user, actor=request.user
            ),
        )


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "prefix",
        "user",
        "name",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["revoked_at"]
    search_fields = ["user__username", "prefix", "name"]
    readonly_fields = [
        "user",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    exclude = ["digest"]
    actions = ["revoke"]

    def has_add_permission(self, request: Any) -> bool:
        return False  # tokens are issued through POST /api/v1/auth/token/

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: Any, queryset: Any) -> None:
        for token in queryset:
            services.api_token_revoke(token=token, actor=request.user)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Append-only: visible, never editable."""

    list_display = [
        "created_at",
        "actor_username",
        "action",
        "object_type",
        "object_id",
        "tenant_slug",
    ]
    list_filter = ["action", "object_type"]
    search_fields = ["object_id", "tenant_slug", "actor_username"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
