"""The expand / contract rules (docs/develop/migrations.md) as a check over migration
operations: while a migration runs, and after it, the previous release's code still serves on
the new schema, so a migration after the previous release may not take away or rename what
that release reads, nor add a NOT NULL column its INSERTs leave out without a database
default.

The previous release is .ci/previous-release: its last migration of each app. Everything the
migration graph has after those is unreleased and checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import migrations, models
from django.db.migrations.graph import MigrationGraph
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

PREVIOUS_RELEASE = Path(settings.BASE_DIR) / ".ci" / "previous-release"

Key = tuple[str, str]  # (app label, migration name)


@dataclass(frozen=True)
class PreviousRelease:
    version: str
    commit: str
    leaves: tuple[Key, ...]


def previous_release(path: Path = PREVIOUS_RELEASE) -> PreviousRelease:
    version = commit = ""
    leaves: list[Key] = []
    for line in path.read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "version":
            version = words[1]
        elif words[0] == "commit":
            commit = words[1]
        elif words[0] == "migration":
            leaves.append((words[1], words[2]))
    return PreviousRelease(version, commit, tuple(leaves))


@dataclass(frozen=True)
class Problem:
    migration: Key
    operation: str
    why: str

    def __str__(self) -> str:
        app, name = self.migration
        return f"{app}.{name}: {self.operation}: {self.why}"


def _needs_db_default(field: models.Field) -> bool:  # type: ignore[type-arg]
    """A column the previous release's INSERTs leave out: NOT NULL with no database default."""
    if field.many_to_many or field.primary_key or field.generated:
        return False
    return not field.null and field.db_default is models.NOT_PROVIDED


def _database_operations(operations: Iterable[object]) -> Iterator[object]:
    """What reaches the database: SeparateDatabaseAndState's state half changes only Django's
    idea of the models (how a release stops reading a column it drops in the next one)."""
    for operation in operations:
        if isinstance(operation, migrations.SeparateDatabaseAndState):
            yield from _database_operations(operation.database_operations)
        else:
            yield operation


def check_operations(
    migration: Key, operations: Iterable[object], released: ProjectState
) -> list[Problem]:
    """The problems of one unreleased migration's operations, given the previous release's
    models (``released``: what its code reads and writes)."""
    problems: list[Problem] = []
    app = migration[0]

    def model_released(name: str) -> bool:
        return (app, name.lower()) in released.models

    def field_released(model: str, name: str) -> models.Field | None:  # type: ignore[type-arg]
        state = released.models.get((app, model.lower()))
        return state.fields.get(name) if state is not None else None

    def problem(operation: object, why: str) -> None:
        problems.append(Problem(migration, operation.describe(), why))  # type: ignore[attr-defined]

    for op in _database_operations(operations):
        if isinstance(op, migrations.AddField):
            if model_released(op.model_name) and _needs_db_default(op.field):
                problem(
                    op,
                    "a NOT NULL column without a database default: the previous release's "
                    "INSERTs leave it out and fail (give the field db_default=..., or null=True)",
                )
        elif isinstance(op, migrations.AlterField):
            before = field_released(op.model_name, op.name)
            if before is not None and _needs_db_default(op.field) and not _needs_db_default(before):
                problem(
                    op,
                    "the column becomes NOT NULL without a database default (or loses its "
                    "default) while the previous release may leave it out",
                )
        elif isinstance(op, migrations.RemoveField):
            if field_released(op.model_name, op.name) is not None:
                problem(
                    op,
                    "the previous release reads this column: stop reading it first (a "
                    "SeparateDatabaseAndState that removes it from the model only), drop it "
                    "a release later",
                )
        elif isinstance(op, migrations.RenameField):
            if field_released(op.model_name, op.old_name) is not None:
                problem(
                    op,
                    "the previous release reads the old name: add the new column, write both, "
                    "drop the old one a release later",
                )
        elif isinstance(op, migrations.DeleteModel | migrations.RenameModel):
            name = op.name if isinstance(op, migrations.DeleteModel) else op.old_name
            if model_released(name):
                problem(op, "the previous release reads this table: remove it a release later")
        elif isinstance(op, migrations.AlterModelTable) and model_released(op.name):
            problem(op, "the previous release reads the table under its old name")
    return problems


def project_apps() -> set[str]:
    from django.apps import apps

    base = Path(settings.BASE_DIR).resolve()
    return {
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).resolve().is_relative_to(base)
        and "site-packages" not in Path(config.path).parts  # a virtualenv inside the checkout
    }


def unreleased_problems(release: PreviousRelease | None = None) -> list[Problem]:
    """Every problem of every migration after the previous release, in the graph's order."""
    release = release or previous_release()
    loader = MigrationLoader(None, ignore_no_migrations=True)
    graph = loader.graph
    released_keys: set[Key] = set()
    for leaf in release.leaves:
        released_keys.update(graph.forwards_plan(leaf))
    released_state = loader.project_state(nodes=list(release.leaves), at_end=True)
    apps = project_apps()
    problems: list[Problem] = []
    for key in _plan(graph):
        if key[0] not in apps or key in released_keys:
            continue
        problems.extend(check_operations(key, loader.graph.nodes[key].operations, released_state))
    return problems


def _plan(graph: MigrationGraph) -> list[Key]:
    """Every migration, each after those it depends on."""
    plan: list[Key] = []
    for leaf in sorted(graph.leaf_nodes()):
        for key in graph.forwards_plan(leaf):
            if key not in plan:
                plan.append(key)
    return plan
