"""Every tenant's guarantees summed per flavor and resource (``GuaranteeTotal``), kept by
triggers on ``quotas_quota`` in the database itself, so that every way a quota row changes (the
services, a bulk insert, a cascade, a restore, a hand-run statement) keeps the sum; filled from
the rows there are."""

import django.db.models.deletion
from django.db import migrations, models

# PostgreSQL: one row-level trigger for the three operations.
POSTGRESQL = [
    """
    CREATE FUNCTION quotas_guarantee_total_keep() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            UPDATE quotas_guaranteetotal SET guaranteed = guaranteed - OLD.guaranteed
             WHERE flavor_id = OLD.flavor_id AND resource = OLD.resource;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO quotas_guaranteetotal (flavor_id, resource, guaranteed)
            VALUES (NEW.flavor_id, NEW.resource, NEW.guaranteed)
            ON CONFLICT (flavor_id, resource)
            DO UPDATE SET guaranteed = quotas_guaranteetotal.guaranteed + EXCLUDED.guaranteed;
        END IF;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE TRIGGER quotas_quota_guarantee_total
    AFTER INSERT OR UPDATE OR DELETE ON quotas_quota
    FOR EACH ROW EXECUTE FUNCTION quotas_guarantee_total_keep()
    """,
]
POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS quotas_quota_guarantee_total ON quotas_quota",
    "DROP FUNCTION IF EXISTS quotas_guarantee_total_keep()",
]

# SQLite: a trigger per operation (no shared functions); the row is made first if missing.
_ADD = """
    INSERT OR IGNORE INTO quotas_guaranteetotal (flavor_id, resource, guaranteed)
    VALUES (NEW.flavor_id, NEW.resource, 0);
    UPDATE quotas_guaranteetotal SET guaranteed = guaranteed + NEW.guaranteed
     WHERE flavor_id = NEW.flavor_id AND resource = NEW.resource;
"""
_SUBTRACT = """
    UPDATE quotas_guaranteetotal SET guaranteed = guaranteed - OLD.guaranteed
     WHERE flavor_id = OLD.flavor_id AND resource = OLD.resource;
"""
SQLITE = [
    f"CREATE TRIGGER quotas_quota_total_insert AFTER INSERT ON quotas_quota BEGIN {_ADD} END",
    f"CREATE TRIGGER quotas_quota_total_update AFTER UPDATE ON quotas_quota BEGIN {_SUBTRACT} {_ADD} END",  # noqa: E501
    f"CREATE TRIGGER quotas_quota_total_delete AFTER DELETE ON quotas_quota BEGIN {_SUBTRACT} END",
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS quotas_quota_total_{operation}"
    for operation in ("insert", "update", "delete")
]

FILL = """
    INSERT INTO quotas_guaranteetotal (flavor_id, resource, guaranteed)
    SELECT flavor_id, resource, SUM(guaranteed) FROM quotas_quota GROUP BY flavor_id, resource
"""


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement)


def triggers_create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"no guarantee-total triggers for {vendor}")
    _run(schema_editor, [FILL, *(POSTGRESQL if vendor == "postgresql" else SQLITE)])


def triggers_drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    _run(schema_editor, POSTGRESQL_DROP if vendor == "postgresql" else SQLITE_DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0013_cluster_pools"),
    ]

    operations = [
        migrations.CreateModel(
            name="GuaranteeTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("resource", models.CharField(max_length=100)),
                ("guaranteed", models.DecimalField(decimal_places=3, max_digits=30)),
                (
                    "flavor",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="quotas.resourceflavor",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("flavor", "resource"), name="guarantee_total_unique"
                    )
                ],
            },
        ),
        migrations.RunPython(triggers_create, triggers_drop),
    ]
