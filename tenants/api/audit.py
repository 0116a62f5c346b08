"""The audit trail and the caller's notifications, read-only (the trail is append-only: no
route edits or deletes it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.http import StreamingHttpResponse
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.filters import UtcIsoDateTimeFilter
from core.api.serializers import StrictInputSerializer
from core.csvexport import csv_writer
from tenants import selectors, services
from tenants.api.base import caller
from tenants.choices import AuditSource
from tenants.models import AuditEvent, Notification

EXPORT_LIMIT = 100_000


class AuditEventOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_username")
    tenant = serializers.CharField(source="tenant_slug")

    class Meta:
        model = AuditEvent
        fields = ["id", "created_at", "actor", "source", "action", "object_type", "object_id",
                  "tenant", "before", "after"]  # fmt: skip


class AuditEventFilter(filters.FilterSet):
    tenant = filters.CharFilter(field_name="tenant_slug")
    action = filters.CharFilter()
    object_id = filters.CharFilter()
    source = filters.ChoiceFilter(choices=AuditSource.choices)
    since = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["tenant", "action", "object_id", "source"]


class _Echo:
    def write(self, value: str) -> str:
        return value


class AuditEventViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Every state change: who, what, before, after, when and from where. Members see their
    tenants' events, platform admins all."""

    serializer_class = AuditEventOutput
    queryset = AuditEvent.objects.none()  # for the schema; get_queryset() scopes it
    filterset_class = AuditEventFilter

    def get_queryset(self) -> Any:
        return selectors.audit_events_for_user(user=caller(self.request))

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR})
    @action(detail=False, methods=["get"], url_path="export")
    def export(self, request: Request) -> StreamingHttpResponse:
        """The same rows (same filters) as CSV, newest first, up to 100,000."""
        events = self.filter_queryset(self.get_queryset())[:EXPORT_LIMIT]
        writer = csv_writer(_Echo())
        header = ["created_at", "actor", "source", "action", "object_type", "object_id", "tenant",
                  "before", "after"]  # fmt: skip

        def rows() -> Iterator[str]:
            yield writer.writerow(header)
            for e in events.iterator(chunk_size=2000):
                yield writer.writerow([
                    e.created_at.isoformat(), e.actor_username, e.source, e.action,
                    e.object_type, e.object_id, e.tenant_slug, e.before or "", e.after or "",
                ])  # fmt: skip

        response = StreamingHttpResponse(rows(), content_type="text/csv")
        response["Content-Disposition"] = 'attachment; filename="audit-events.csv"'
        return response


class NotificationOutput(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "subject", "body", "url", "created_at", "read_at"]


class MarkReadInput(StrictInputSerializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(), required=False,
        help_text="Notifications to mark read; all unread when absent.",
    )  # fmt: skip


class MarkReadOutput(serializers.Serializer):
    marked = serializers.IntegerField()


class NotificationViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The caller's inbox."""

    serializer_class = NotificationOutput
    queryset = Notification.objects.none()  # for the schema; get_queryset() scopes it

    def get_queryset(self) -> Any:
        return selectors.notifications_for_user(user=caller(self.request))

    @extend_schema(request=MarkReadInput, responses=MarkReadOutput)
    @action(detail=False, methods=["post"], url_path="mark-read")
    def mark_read(self, request: Request) -> Response:
        data = MarkReadInput(data=request.data)
        data.is_valid(raise_exception=True)
        marked = services.notifications_mark_read(
            user=caller(request), ids=data.validated_data.get("ids")
        )
        return Response({"marked": marked}, status=status.HTTP_200_OK)
