"""The guarantee-total trigger function finds its tables in its own schema, whatever the
search_path of the session whose write fires it.

``quotas_guarantee_total_keep()`` (0014) names ``quotas_guaranteetotal`` without a schema, so it
resolved the table through the caller's search_path: under ``pg_restore`` and ``pg_dump``'s
scripts (which set an empty search_path) or a hand-run session with another path, a quota row
written fails with "relation quotas_guaranteetotal does not exist".

Fixed by pinning the function's search_path to the schema the migrations run in (where the
function and the tables are; ``public`` by default, the first schema of the connection's
search_path otherwise), then ``pg_temp`` (searched first unless named, so it goes last):
``ALTER FUNCTION ... SET search_path``. Pinned, not ``public.``-qualified in the body, so that an
installation in another schema works too; not ``SET search_path FROM CURRENT``, which would also
keep ``"$user"`` and let a schema named after the caller come first. ``pg_dump`` keeps the
setting with the function, so a restored database has it."""

from django.db import migrations

FUNCTION = "quotas_guarantee_total_keep()"


def _schema(schema_editor) -> str:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        return cursor.fetchone()[0]


def search_path_pin(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite's triggers have no search path
    schema = schema_editor.quote_name(_schema(schema_editor))
    schema_editor.execute(
        f"ALTER FUNCTION {schema}.{FUNCTION} SET search_path = {schema}, pg_temp"
    )


def search_path_unpin(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema = schema_editor.quote_name(_schema(schema_editor))
    schema_editor.execute(f"ALTER FUNCTION {schema}.{FUNCTION} RESET search_path")


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0018_namespace_reservations_from_clusters"),
    ]

    operations = [
        migrations.RunPython(search_path_pin, search_path_unpin),
    ]
