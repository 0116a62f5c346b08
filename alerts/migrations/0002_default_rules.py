"""The default rules (R11, R12): warn at 80% of a limit, hold new work at 100%, suspend a
workload idle for 3 days after a day's notice, flag one past 7 days of run time, and an
allocation under 30% utilisation for a week. Admins edit them afterwards."""

from datetime import timedelta

from django.db import migrations

DEFAULTS = [
    {
        "name": "quota-warning",
        "kind": "quota_warning",
        "description": "A tenant's GPU use of a flavor at or above 80% of its limit.",
        "severity": "warning",
        "act": False,
        "threshold_pct": 80.0,
    },
    {
        "name": "quota-block",
        "kind": "quota_block",
        "description": "At 100% of the limit new work is held (ClusterQueue stopPolicy: Hold) "
        "until use drops below it; running work continues.",
        "severity": "critical",
        "act": True,
        "threshold_pct": 100.0,
    },
    {
        "name": "idle-workload",
        "kind": "idle_workload",
        "description": "No GPU activity (utilisation at most 1%) and no progress for 3 days: "
        "the lead is told, and after a day's grace the workload is suspended.",
        "severity": "warning",
        "act": True,
        "threshold_pct": 1.0,
        "duration": timedelta(days=3),
        "grace": timedelta(days=1),
    },
    {
        "name": "max-runtime",
        "kind": "max_runtime",
        "description": "A workload running longer than 7 days.",
        "severity": "warning",
        "act": False,
        "duration": timedelta(days=7),
    },
    {
        "name": "low-utilization",
        "kind": "low_utilization",
        "description": "GPUs held for a week at under 30% mean utilisation.",
        "severity": "info",
        "act": False,
        "threshold_pct": 30.0,
        "duration": timedelta(days=7),
    },
]


def seed(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    for fields in DEFAULTS:
        AlertRule.objects.get_or_create(name=fields["name"], defaults=fields)


def unseed(apps, schema_editor):
    AlertRule = apps.get_model("alerts", "AlertRule")
    AlertRule.objects.filter(name__in=[d["name"] for d in DEFAULTS]).delete()


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
