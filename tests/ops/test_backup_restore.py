"""docs/operations.md's Backup and Restore sections, run as written: the Backup section's
``pg_dump`` line and the Restore section's commands, through a shell, with the server's own
``pg_dump`` / ``pg_restore``, from a database filled by ``manage.py demo`` into a database the
Restore section creates empty. The restored database needs no migration, serves the same API
answers, and the portal's writes work on it: the capacity check refuses what the others'
guarantees leave no room for, the guarantee totals' trigger fires from a session with
``pg_restore``'s empty search_path, and a sample past the dump's day partitions is stored."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from django.conf import settings

from tests.conftest import require_service
from tests.ops.conftest import BASE_DIR, run_python

DOCS = BASE_DIR / "docs" / "operations.md"
# The values the Restore section's example uses, replaced by the test's own.
DOCS_DATABASE = "portal_restored"
DOCS_OWNER = "--owner=portal"
DOCS_DUMP = "portal-2026-12-03.dump"
DOCS_URL = "postgres://.../portal_restored"


def section_script(title: str) -> str:
    """The shell commands of a ``## title`` section's ``sh`` blocks, one a line."""
    text = DOCS.read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return "".join(re.findall(r"```sh\n(.*?)```", section, re.DOTALL))


def commands(script: str, tool: str) -> list[str]:
    return [line for line in script.splitlines() if line.split(" ", 1)[0] == tool]


def server_tools(url: str) -> dict[str, str]:
    """The environment of the PostgreSQL client tools: the server's own major version first
    on PATH (what pg_lsclusters shows), and the connection in PG* variables."""
    with psycopg.connect(url) as conn:
        (number,) = conn.execute("SHOW server_version_num").fetchone()  # type: ignore[misc]
    bindir = Path(f"/usr/lib/postgresql/{int(number) // 10000}/bin")
    path = f"{bindir}:/usr/bin:/bin" if bindir.is_dir() else "/usr/bin:/bin"
    env = {
        "PATH": path,
        "PGHOST": urlsplit(url).hostname or "127.0.0.1",
        "PGPORT": str(urlsplit(url).port or 5432),
        "PGUSER": urlsplit(url).username or "postgres",
        **({"PGPASSWORD": urlsplit(url).password} if urlsplit(url).password else {}),
    }
    for tool in ("pg_dump", "pg_restore", "createdb"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], env=env, capture_output=True)
        require_service(tool, found.returncode == 0, f"{tool} is not installed")
    return env


def shell(script: str, *, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def probe(url: str, call: str) -> Any:
    """One function of tests/ops/restore_probe.py, run by a portal process on ``url``."""
    out = run_python(
        url,
        "manage.py",
        "shell",
        "-c",
        f"from tests.ops import restore_probe; restore_probe.{call}",
    )
    return json.loads(out.strip().splitlines()[-1])


def partitions(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'public.usage_sample'::regclass ORDER BY 1"
        ).fetchall()
    return [name for (name,) in rows]


def test_the_documented_commands_are_a_full_dump_and_a_restore_into_an_empty_database():
    """What the test below runs is what operators read: no --data-only, the flags named."""
    backup, restore = section_script("Backup"), section_script("Restore")
    [dump] = commands(backup, "pg_dump")
    assert "--format=custom" in dump.split() and "--no-owner" in dump.split()
    assert '"$DATABASE_URL"' in dump
    [create] = commands(restore, "createdb")
    assert create.split()[-1] == DOCS_DATABASE and DOCS_OWNER in create.split()
    [load] = commands(restore, "pg_restore")
    assert {"--no-owner", "--exit-on-error", f"--dbname={DOCS_DATABASE}"} <= set(load.split())
    assert load.split()[-1] == DOCS_DUMP
    assert f"DATABASE_URL={DOCS_URL} python manage.py migrate --check" in restore
    assert "--data-only" not in backup + restore.replace("with `--data-only`", "")


@pytest.mark.integration
def test_a_dump_restored_as_documented_serves_the_api(
    scratch_db: Callable[..., str], tmp_path: Path
) -> None:
    source = scratch_db("restore_src")
    env = server_tools(source)
    run_python(source, "manage.py", "migrate", "--noinput")
    run_python(source, "manage.py", "demo")
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0).isoformat()
    before = probe(source, f"reads({end!r})")
    refused_before = probe(source, "capacity_refusal()")

    # Backup, as the docs' line says, into a folder of its own.
    [dump_line] = commands(section_script("Backup"), "pg_dump")
    shell(dump_line, env={**env, "DATABASE_URL": source}, cwd=tmp_path)
    [dump] = list(tmp_path.glob("portal-*.dump"))

    # Restore, the docs' commands with the test's names: a database created empty, the dump
    # restored into it, and the migrations checked with the portal's own manage.py.
    target = scratch_db("restored", create=False)
    target_name = urlsplit(target).path[1:]
    script = (
        section_script("Restore")
        .replace(DOCS_URL, target)
        .replace(DOCS_OWNER, f"--owner={env['PGUSER']}")
        .replace(DOCS_DUMP, str(dump))
        .replace(DOCS_DATABASE, target_name)
        .replace("python manage.py", f"{sys.executable} manage.py")
    )
    assert target_name in script and str(dump) in script
    portal_env = {
        **os.environ,
        **env,
        "PATH": f"{env['PATH']}:{os.environ.get('PATH', '')}",
        "DJANGO_SETTINGS_MODULE": "portal.settings.demo",
    }
    shell(script, env=portal_env, cwd=Path(settings.BASE_DIR))

    # The API answers the same tenants, quotas, requests and usage from the restored database.
    after = probe(target, f"reads({end!r})")
    assert after == before

    def answer(part: str) -> list[Any]:
        [found] = [value for path, value in after.items() if part in path]
        return found

    tenants, quotas, requests = answer("/tenants/?"), answer("/quotas/"), answer("/quota-requests/")
    usage = answer("/usage/")
    assert {"team-a", "team-b"} <= {t["slug"] for t in tenants}
    assert quotas and requests
    points = [p for series in usage[0]["series"] for p in series["points"]]
    assert any(p["gpu_utilization"] for p in points), "the restored usage has no figures"

    # The capacity check reads the restored totals: other tenants' guarantees are what their
    # quota rows sum to, and one GPU more than what is left is refused, naming the field.
    refused = probe(target, "capacity_refusal()")
    assert refused == refused_before
    assert refused["held"] == refused["summed"]
    assert "items[0].guaranteed" in refused["refused"], refused
    assert "does not fit" in refused["message"]

    # The trigger keeps the totals whatever the writing session's search_path: pg_restore's
    # empty one, or one naming first a schema with a table of the same name.
    with psycopg.connect(target) as conn:
        conn.execute(
            "CREATE SCHEMA decoy; CREATE TABLE decoy.quotas_guaranteetotal "
            "(LIKE public.quotas_guaranteetotal INCLUDING ALL)"
        )
        for search_path in ("''", "decoy, public"):
            conn.execute(f"SET search_path = {search_path}")
            flavor, resource, total = conn.execute(
                "SELECT flavor_id, resource, guaranteed FROM public.quotas_guaranteetotal "
                "WHERE guaranteed > 0 ORDER BY id LIMIT 1"
            ).fetchone()  # type: ignore[misc]
            conn.execute(
                "UPDATE public.quotas_quota SET guaranteed = guaranteed + 1 WHERE id = ("
                " SELECT min(id) FROM public.quotas_quota WHERE flavor_id = %s AND resource = %s)",
                [flavor, resource],
            )
            (kept,) = conn.execute(
                "SELECT guaranteed FROM public.quotas_guaranteetotal "
                "WHERE flavor_id = %s AND resource = %s",
                [flavor, resource],
            ).fetchone()  # type: ignore[misc]
            assert kept == total + 1, search_path
            decoy = conn.execute("SELECT count(*) FROM decoy.quotas_guaranteetotal").fetchone()
            assert decoy == (0,), search_path
        conn.rollback()

    # The day partitions of the raw samples came with the dump; a sample on a later day gets
    # its partition as it is written.
    restored_partitions = partitions(target)
    assert restored_partitions and restored_partitions == partitions(source)
    ahead = settings.USAGE_PARTITIONS_AHEAD_DAYS + 5
    written = probe(target, f"sample_ahead({ahead})")
    assert written["written"] == 1 and written["partition"] not in restored_partitions
    assert written["partition"] in partitions(target)


@pytest.mark.integration
def test_an_installation_in_another_schema_keeps_its_totals_from_any_search_path(
    scratch_db: Callable[..., str],
) -> None:
    """The portal migrated into a schema of its own (``options=-c search_path=portal`` in
    DATABASE_URL): the trigger's function is pinned to that schema, and a quota written from a
    session with an empty search_path, or with ``public`` (holding a table of the same name)
    first, adds to the portal's total."""
    url = scratch_db("schema")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA portal")
    in_schema = f"{url}?options=-c%20search_path%3Dportal"
    run_python(in_schema, "manage.py", "migrate", "--noinput")
    flavor = probe(in_schema, "one_quota()")["flavor"]
    with psycopg.connect(url) as conn:
        (config,) = conn.execute(
            "SELECT proconfig FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE proname = 'quotas_guarantee_total_keep' AND nspname = 'portal'"
        ).fetchone()  # type: ignore[misc]
        assert config == ["search_path=portal, pg_temp"]
        conn.execute(
            "CREATE TABLE public.quotas_guaranteetotal "
            "(LIKE portal.quotas_guaranteetotal INCLUDING ALL)"
        )
        for search_path in ("''", "public, portal"):
            conn.execute(f"SET search_path = {search_path}")
            conn.execute(
                "UPDATE portal.quotas_quota SET guaranteed = guaranteed + 1 "
                "WHERE flavor_id = %s AND resource = 'nvidia.com/gpu'",
                [flavor],
            )
        totals = conn.execute(
            "SELECT (SELECT guaranteed FROM portal.quotas_guaranteetotal WHERE flavor_id = %s "
            "AND resource = 'nvidia.com/gpu'), (SELECT count(*) FROM public.quotas_guaranteetotal)",
            [flavor],
        ).fetchone()
        assert totals == (6, 0)  # 4 + 1 + 1, and nothing in the table of the same name
        conn.rollback()
