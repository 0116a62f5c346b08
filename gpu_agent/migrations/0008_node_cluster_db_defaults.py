"""The database defaults of Node's two NOT NULL columns from 0007 (issue 32, expand /
contract: docs/develop/migrations.md), for a database that ran 0007 before it was edited to
carry them. 0.1.0's code creates nodes without these columns, so without a default its agent
registrations fail while an upgrade runs and after a rollback.

0007 now adds the columns with their defaults, so Django's model state already has them and an
AlterField here would write nothing: the defaults are set in SQL (the same as 0007's, harmless
where they are already set). PostgreSQL only: a SQLite database is the one-machine demo, which
never runs two releases at once."""

from django.db import migrations

SET_DEFAULTS = """
ALTER TABLE gpu_agent_node ALTER COLUMN cluster_gpu_product SET DEFAULT '';
ALTER TABLE gpu_agent_node ALTER COLUMN cluster_mig SET DEFAULT '{}'::jsonb;
"""


def set_defaults(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(SET_DEFAULTS)


class Migration(migrations.Migration):
    dependencies = [
        ("gpu_agent", "0007_node_cluster_reading"),
    ]

    operations = [migrations.RunPython(set_defaults, migrations.RunPython.noop)]
