"""The 100% hold (R11) moves into quotas (``quotas.QuotaHold``): every tenant an open alert
holds today gets its row (source ``alert:<id>``, as ``alerts.services.hold_source`` names
it), so an upgrade keeps existing holds. Expand only: ``Alert.action_state`` stays as it is,
and the previous release (which still reads the alerts) keeps serving."""

from django.db import migrations

OPEN_STATES = ("firing", "acknowledged")
BLOCKED = "blocked"


def holds_into_quotas(apps, schema_editor):
    Alert = apps.get_model("alerts", "Alert")
    QuotaHold = apps.get_model("quotas", "QuotaHold")
    held = Alert.objects.filter(
        state__in=OPEN_STATES,
        action_state=BLOCKED,
        tenant_id__isnull=False,
        cluster_id__isnull=False,
    ).values_list("pk", "tenant_id", "cluster_id", "message")
    QuotaHold.objects.bulk_create(
        [
            QuotaHold(
                tenant_id=tenant_id,
                cluster_id=cluster_id,
                source=f"alert:{pk}",
                detail={"alert": pk, "message": message},
            )
            for pk, tenant_id, cluster_id, message in held
        ],
        ignore_conflicts=True,
    )


def holds_back(apps, schema_editor):
    apps.get_model("quotas", "QuotaHold").objects.filter(source__startswith="alert:").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("alerts", "0004_action_state_words"),
        ("quotas", "0016_quota_hold"),
    ]

    operations = [migrations.RunPython(holds_into_quotas, holds_back)]
