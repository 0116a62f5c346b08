"""Migrations after the previous release keep its code working (expand / contract,
docs/develop/migrations.md): .ci/upgrade-smoke runs its API against the migrated schema in CI;
this checks every unreleased migration's operations, so a rename, a drop or a NOT NULL column
without a database default fails here, in make test, before any upgrade runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.db import migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

from tests.ops.migration_rules import (
    check_operations,
    previous_release,
    project_apps,
    unreleased_problems,
)

BASE_DIR = Path(settings.BASE_DIR)
KEY = ("tenants", "9999_future")


@pytest.fixture(scope="module")
def released() -> ProjectState:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    return loader.project_state(nodes=list(previous_release().leaves), at_end=True)


def test_every_migration_since_the_previous_release_keeps_its_code_working():
    problems = unreleased_problems()
    assert not problems, "\n".join(str(p) for p in problems)


def test_the_previous_release_is_a_release_with_its_own_migrations():
    release = previous_release()
    assert re.fullmatch(r"[0-9a-f]{40}", release.commit)
    changelog = (BASE_DIR / "CHANGELOG.md").read_text()
    assert f"## [{release.version}] - " in changelog
    loader = MigrationLoader(None, ignore_no_migrations=True)
    # Every app of the release is still here (an app added since has no line: all of its
    # migrations are unreleased, its tables new).
    assert {app for app, _ in release.leaves} <= project_apps()
    for leaf in release.leaves:
        assert leaf in loader.graph.nodes, f"{leaf} is not a migration of this tree"


def test_the_listed_migrations_are_those_of_the_release_commit():
    """Where the clone has the release's commit (CI's shallow clones may not), the migrations
    .ci/previous-release calls released are exactly that commit's."""
    release = previous_release()
    git = ["git", "-C", str(BASE_DIR)]
    if subprocess.run([*git, "cat-file", "-e", f"{release.commit}^{{commit}}"]).returncode:
        pytest.skip(f"the clone does not have {release.commit} (a shallow clone)")
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    for app, name in release.leaves:
        listed = subprocess.run(
            [*git, "ls-tree", "--name-only", release.commit, f"{app}/migrations/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        at_commit = {Path(p).stem for p in listed if re.fullmatch(r"\d{4}_\w+\.py", Path(p).name)}
        plan = {n for a, n in graph.forwards_plan((app, name)) if a == app}
        assert plan == at_commit, app


# --- the check itself, on migrations a future change might write ---------------------------


def problems(operations: list[object], released: ProjectState) -> list[str]:
    return [p.why for p in check_operations(KEY, operations, released)]


def test_a_not_null_column_without_a_database_default_is_refused(released):
    added = migrations.AddField("tenant", "region", models.CharField(max_length=20, default="eu"))
    (why,) = problems([added], released)
    assert "NOT NULL column without a database default" in why


@pytest.mark.parametrize(
    "field",
    [
        models.CharField(max_length=20, default="eu", db_default="eu"),
        models.CharField(max_length=20, null=True),
        models.JSONField(default=dict, db_default={}),
        models.ManyToManyField("tenants.User"),
    ],
    ids=["db-default", "nullable", "json-db-default", "many-to-many"],
)
def test_a_column_the_previous_release_can_leave_out_is_allowed(released, field):
    assert problems([migrations.AddField("tenant", "region", field)], released) == []


def test_new_tables_are_free(released):
    created = migrations.CreateModel(
        "Region",
        [
            ("id", models.BigAutoField(primary_key=True)),
            ("name", models.CharField(max_length=20)),
        ],
    )
    added = migrations.AddField("region", "code", models.CharField(max_length=5, default="x"))
    assert problems([created, added], released) == []


def test_renaming_or_dropping_what_the_previous_release_reads_is_refused(released):
    for operation in (
        migrations.RenameField("tenant", "display_name", "title"),
        migrations.RemoveField("tenant", "display_name"),
        migrations.DeleteModel("Notification"),
        migrations.RenameModel("Notification", "Message"),
        migrations.AlterModelTable("notification", "inbox"),
        migrations.AlterField("tenant", "archived_at", models.DateTimeField()),
    ):
        assert len(problems([operation], released)) == 1, operation.describe()


def test_a_column_dropped_only_from_the_models_is_the_expand_step(released):
    """Release N stops reading the column (state only); release N+1 drops it."""
    stop_reading = migrations.SeparateDatabaseAndState(
        state_operations=[migrations.RemoveField("tenant", "description")]
    )
    assert problems([stop_reading], released) == []
    dropped_too = migrations.SeparateDatabaseAndState(
        database_operations=[migrations.RemoveField("tenant", "description")]
    )
    assert len(problems([dropped_too], released)) == 1
