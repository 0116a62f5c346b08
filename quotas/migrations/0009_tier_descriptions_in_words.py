"""The seeded tiers' descriptions without the requirement code they were written from
("R9 tier: 2 GPUs, ..." -> "Standard tier: 2 GPUs, ..."); a description an admin wrote stays."""

from django.db import migrations

OLD, NEW = "R9 tier: ", "Standard tier: "


def forwards(apps, schema_editor):
    TierTemplate = apps.get_model("quotas", "TierTemplate")
    for tier in TierTemplate.objects.filter(description__startswith=OLD):
        tier.description = NEW + tier.description.removeprefix(OLD)
        tier.save(update_fields=["description"])


def backwards(apps, schema_editor):
    TierTemplate = apps.get_model("quotas", "TierTemplate")
    for tier in TierTemplate.objects.filter(description__startswith=NEW):
        tier.description = OLD + tier.description.removeprefix(NEW)
        tier.save(update_fields=["description"])


class Migration(migrations.Migration):
    dependencies = [("quotas", "0008_help_texts_without_requirement_codes")]

    operations = [migrations.RunPython(forwards, backwards)]
