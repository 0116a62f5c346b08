"""A populated portal survives a ``pg_dump`` / ``pg_restore`` round trip, as docs/operations.md
tells operators to take it: every table's rows, every sequence, and a portal that works on it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.conftest import require_service
from tests.ops.conftest import run_python


def _tables(url: str) -> dict[str, tuple[int, str]]:
    """Each table's row count and a digest of its rows, in a stable order."""
    with psycopg.connect(url) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1"
            )
        ]
        seen = {}
        for name in names:
            count, digest = conn.execute(
                f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM \"{name}\" t"  # noqa: S608 - names from the catalogue
            ).fetchone()  # type: ignore[misc]
            seen[name] = (count, digest)
    return seen


def _sequences(url: str) -> dict[str, int | None]:
    with psycopg.connect(url) as conn:
        return dict(
            conn.execute(  # type: ignore[arg-type]
                "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public'"
            ).fetchall()
        )


def _pg_env(url: str) -> dict[str, str]:
    parts = urlsplit(url)
    return {
        "PGHOST": parts.hostname or "127.0.0.1",
        "PGPORT": str(parts.port or 5432),
        "PGUSER": parts.username or "postgres",
        **({"PGPASSWORD": parts.password} if parts.password else {}),
        "PATH": "/usr/bin:/bin",
    }


@pytest.mark.integration
def test_demo_database_round_trips_through_pg_dump(scratch_db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    require_service("pg_dump", shutil.which("pg_dump") is not None, "pg_dump is not installed")
    source = scratch_db("backup_src")
    run_python(source, "manage.py", "migrate", "--noinput")
    run_python(source, "manage.py", "demo")
    before = _tables(source)
    assert before["tenants_tenant"][0] >= 3, "the demo seeded no tenants"
    assert before["approvals_quotachangerequest"][0] > 0

    dump = tmp_path / "portal.dump"
    env = _pg_env(source)
    subprocess.run(
        ["pg_dump", "--format=custom", "--no-owner", f"--file={dump}", urlsplit(source).path[1:]],
        env=env, check=True, timeout=120,
    )  # fmt: skip
    target = scratch_db("backup_dst")
    subprocess.run(
        ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={urlsplit(target).path[1:]}", str(dump)],
        env=env, check=True, timeout=120,
    )  # fmt: skip

    assert _tables(target) == before
    assert _sequences(target) == _sequences(source)
    # The restored database needs no migration, and the portal works on it: alice still leads
    # team-a and can file a request that takes the next id.
    run_python(target, "manage.py", "migrate", "--check", "--noinput")
    out = run_python(
        target,
        "manage.py",
        "shell",
        "-c",
        "from tenants.models import Tenant, User; "
        "alice = User.objects.get(username='alice'); "
        "print(sorted(Tenant.objects.visible_to(alice).values_list('slug', flat=True))); "
        "t = Tenant.objects.create(slug='after-restore', display_name='x'); print(t.pk)",
    )
    slugs, new_id = out.strip().splitlines()[-2:]
    assert "team-a" in slugs
    with psycopg.connect(source) as conn:
        (highest,) = conn.execute("SELECT max(id) FROM tenants_tenant").fetchone()  # type: ignore[misc]
    assert int(new_id) > highest
