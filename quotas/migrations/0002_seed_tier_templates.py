"""Seed the standard tier templates: small (trial), medium (regular project), large (core business).

Limits are 1.5x the guarantee, so medium gives Kueue nominalQuota 16 and borrowingLimit 8
for nvidia.com/gpu, as in the seed's example (peak 24).
"""

from decimal import Decimal

from django.db import migrations

GI = 1024**3
TI = 1024**4

TIERS = [
    # name, display, gpus g/l, cpu g/l, memory g/l, jobs running/queued, pods, storage, pvcs
    ("small", "Small (trial)", 4, 6, 8, 12, 64 * GI, 96 * GI, 5, 20, 20, 1 * TI, 10),
    ("medium", "Medium (regular project)", 16, 24, 32, 48, 256 * GI, 384 * GI, 20, 100, 100, 5 * TI, 50),
    ("large", "Large (core business)", 64, 96, 128, 192, 1 * TI, 1536 * GI, 50, 250, 400, 20 * TI, 200),
]


def seed(apps, schema_editor):
    TierTemplate = apps.get_model("quotas", "TierTemplate")
    for order, row in enumerate(TIERS):
        (name, display, gg, gl, cg, cl, mg, ml, jobs, queued, pods, storage, pvcs) = row
        TierTemplate.objects.update_or_create(
            name=name,
            defaults={
                "display_name": display,
                "description": f"Standard tier: {gg} GPUs, {cg} vCPU, {mg // GI} GiB, {jobs} concurrent jobs.",
                "gpus_guaranteed": gg,
                "gpus_limit": gl,
                "cpu_guaranteed": Decimal(cg),
                "cpu_limit": Decimal(cl),
                "memory_guaranteed": Decimal(mg),
                "memory_limit": Decimal(ml),
                "max_running_jobs": jobs,
                "max_queued_jobs": queued,
                "max_pods": pods,
                "storage_bytes": Decimal(storage),
                "max_pvcs": pvcs,
                "sort_order": order,
            },
        )


def unseed(apps, schema_editor):
    apps.get_model("quotas", "TierTemplate").objects.filter(name__in=[t[0] for t in TIERS]).delete()


class Migration(migrations.Migration):
    dependencies = [("quotas", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
