"""Shared fixtures: services that must be real in CI, and the personas every test uses.

Personas (STYLE.md rule 16): ``admin`` (platform admin), ``alice`` (lead of team-a),
``carol`` (member of team-a), ``victor`` (viewer of team-a) and ``bob`` (lead of team-b, the
outsider for team-a's data).
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.apps import apps as django_apps
from django.db import connection
from rest_framework.test import APIClient

from approvals.services import tenant_onboard
from devcluster.runner import Handle, start_in_thread
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE
from quotas.models import Cluster, ResourceFlavor, TierTemplate
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.choices import MembershipRole
from tenants.models import Tenant, User
from tenants.services import membership_set
from tests.factories import GI, ClusterFactory, UserFactory, gpu_flavor, mig_flavor

if TYPE_CHECKING:
    from tests.redis_server import PrivateRedis

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES", "") == "1"


REDIS_DATABASES = 16  # Redis's default number of databases: 0 to 15


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """pytest-xdist (make test: -n), before it starts its workers: worker gwN gets, in its
    environment, Redis database REDIS_URL's + N and its own data directory (DATA_DIR/xdist-gwN),
    read by the settings as it starts and inherited by the processes its tests start (Celery
    workers, manage.py), so one worker's Celery tasks, cache keys, broker and cache files never
    reach another's. pytest-django gives each its own test database (test_<name>_gwN)."""
    from django.conf import settings

    from core.env import env_str

    redis_url = env_str("REDIS_URL", "")
    for spec in specs:
        index = int(spec.id.removeprefix("gw"))
        if redis_url:
            parts = urlsplit(redis_url)
            number = int(parts.path.strip("/") or 0) + index
            if number >= REDIS_DATABASES:
                raise pytest.UsageError(
                    f"REDIS_URL={redis_url}: test worker {spec.id} would need Redis database "
                    f"{number}; use a lower database number or fewer workers (TEST_WORKERS, -n)"
                )
            spec.env["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{number}"))
            spec.env["REDIS_URL_FILE"] = ""  # REDIS_URL, not the file, names the worker's
        spec.env["DATA_DIR"] = str(Path(settings.DATA_DIR) / f"xdist-{spec.id}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands its fault table's rows to the controlling process."""
    from tests.faults.invariants import RESULTS

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fault_results"] = list(RESULTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """pytest-xdist's controlling process gathers the workers' fault rows."""
    from tests.faults.invariants import RESULTS

    RESULTS.extend(getattr(node, "workeroutput", {}).get("fault_results", []))


def pytest_terminal_summary(terminalreporter: object, config: pytest.Config) -> None:
    """The fault table, printed and written once: by the controlling process under xdist."""
    from tests.faults.invariants import write_summary

    if not hasattr(config, "workeroutput"):
        write_summary(terminalreporter)


def require_service(name: str, available: bool, why: str) -> None:
    """Skip when a service is absent, except in CI (REQUIRE_SERVICES=1), where it fails."""
    if available:
        return
    message = f"{name} is not available: {why}"
    if REQUIRE_SERVICES:
        pytest.fail(f"REQUIRE_SERVICES=1 but {message}", pytrace=False)
    pytest.skip(message)


def chromium_path() -> str | None:
    return (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )


@pytest.fixture(scope="session", autouse=True)
def _database_is_postgres_in_ci(django_db_blocker: object) -> None:
    if REQUIRE_SERVICES and connection.vendor != "postgresql":
        pytest.fail(
            "REQUIRE_SERVICES=1 but the suite is not on PostgreSQL: set DATABASE_URL", pytrace=False
        )


def _sql_flush_by_delete(original: Any) -> Any:
    """PostgreSQL's flush, as a transactional test's teardown runs it, with DELETE instead of
    TRUNCATE: TRUNCATE of the ~70 tables gives each (and its indexes) a new file, 2.5-4 s of
    waiting on the disk per test, where a DELETE of the few rows a test wrote takes 0.02-0.08 s.
    The outcome is the same: every table empty, sequences left as they are (TRUNCATE without
    RESTART IDENTITY). Django's foreign keys are DEFERRABLE INITIALLY DEFERRED, so the order of
    the DELETEs (one transaction: execute_sql_flush) does not matter; a flush that resets
    sequences or cascades beyond its tables keeps TRUNCATE."""

    def sql_flush(
        self: Any,
        style: Any,
        tables: Any,
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return original(  # type: ignore[no-any-return]
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [
            "SET CONSTRAINTS ALL DEFERRED",
            # Django's own table names (introspection), quoted.
            *(f"DELETE FROM {style.SQL_FIELD(self.quote_name(table))}" for table in tables),  # noqa: S608
        ]

    return sql_flush


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete() -> Iterator[None]:
    if connection.vendor != "postgresql":
        yield
        return
    from django.db.backends.postgresql.operations import DatabaseOperations

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            DatabaseOperations, "sql_flush", _sql_flush_by_delete(DatabaseOperations.sql_flush)
        )
        yield


@pytest.fixture
def on_postgres() -> None:
    require_service("PostgreSQL", connection.vendor == "postgresql", "DATABASE_URL is not set")


@dataclass
class World:
    """The demo's shape, small: two clusters, three tenants, five personas."""

    a100: Cluster
    h100: Cluster
    a100_gpu: ResourceFlavor
    h100_gpu: ResourceFlavor
    h100_mig: ResourceFlavor
    team_a: Tenant
    team_b: Tenant
    team_c: Tenant
    admin: User
    alice: User
    carol: User
    victor: User
    bob: User
    small: TierTemplate
    medium: TierTemplate


def seed_quota(
    tenant: Tenant,
    cluster: Cluster,
    flavor: ResourceFlavor,
    guaranteed: int,
    limit: int,
    actor: User | None = None,
) -> None:
    quota_set_write(
        tenant=tenant,
        cluster=cluster,
        actor=actor,
        items=[
            QuotaItem(flavor, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit)),
            QuotaItem(flavor, CPU_RESOURCE, Decimal(guaranteed * 8), Decimal(limit * 8)),
            QuotaItem(
                flavor, MEMORY_RESOURCE, Decimal(guaranteed * 64 * GI), Decimal(limit * 64 * GI)
            ),
        ],
        scheduling=SchedulingQuotas(max_running_jobs=5, max_queued_jobs=20, max_pods=20),
    )


def ensure_tier_templates() -> None:
    """The tiers come from a data migration; a transactional test's flush removes them, so
    re-seed them with the migration's own function when they are gone."""
    if not TierTemplate.objects.exists():
        seeding = importlib.import_module("quotas.migrations.0002_seed_tier_templates")
        seeding.seed(django_apps, None)


@pytest.fixture
def world(db: None) -> World:
    ensure_tier_templates()
    admin = UserFactory(username="admin", is_platform_admin=True, is_staff=True, is_superuser=True)
    alice, carol, victor, bob = (
        UserFactory(username=n) for n in ("alice", "carol", "victor", "bob")
    )
    a100 = ClusterFactory(name="demo-a100", elastic_cap_fraction=Decimal("0.625"))
    h100 = ClusterFactory(name="demo-h100")
    a100_gpu = gpu_flavor(a100, "a100-80gb", gpus=16)
    h100_gpu = gpu_flavor(h100, "h100-80gb", gpus=16, weight="2", gpu_model="NVIDIA H100 80GB HBM3")
    h100_mig = mig_flavor(h100, "1g.10gb", count=14, weight="0.286")
    small = TierTemplate.objects.get(name="small")
    medium = TierTemplate.objects.get(name="medium")
    teams = {}
    for slug, lead in (("team-a", alice), ("team-b", bob), ("team-c", None)):
        teams[slug] = tenant_onboard(
            slug=slug,
            display_name=slug.replace("-", " ").title(),
            tier=small,
            cluster=h100,
            gpu_flavor=h100_gpu,
            actor=admin,
            leads=[lead] if lead else [],
        )
    # Members first: a membership change pushes the tenant's quota sets again (RBAC follows
    # the members), which takes a generation; the A100 sets below start at generation 1.
    membership_set(tenant=teams["team-a"], user=carol, role=MembershipRole.MEMBER, actor=admin)
    membership_set(tenant=teams["team-a"], user=victor, role=MembershipRole.VIEWER, actor=admin)
    for slug, g, lim in (("team-a", 6, 10), ("team-b", 4, 6), ("team-c", 2, 4)):
        seed_quota(teams[slug], a100, a100_gpu, g, lim, actor=admin)
    return World(
        a100,
        h100,
        a100_gpu,
        h100_gpu,
        h100_mig,
        teams["team-a"],
        teams["team-b"],
        teams["team-c"],
        admin,
        alice,
        carol,
        victor,
        bob,
        small,
        medium,
    )


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def api_as(api: APIClient):  # type: ignore[no-untyped-def]
    """``api_as(user)`` -> a client authenticated as ``user`` (session-style, no token)."""

    def login(user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user)
        return client

    return login


@pytest.fixture(scope="session")
def standin_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handle]:
    """One local Kubernetes API stand-in (in a thread) for the session."""
    with start_in_thread(kubeconfig_path=tmp_path_factory.mktemp("standin") / "kc") as handle:
        yield handle


@pytest.fixture
def standin(standin_server: Handle, world: World) -> Handle:
    """The stand-in, emptied but for what a managed cluster holds for the portal
    (``tests.cluster_access``), with demo-a100 pushing to it."""
    from tests.cluster_access import hold_cluster_access
    from tests.standin import point_at

    standin_server.reset()
    hold_cluster_access(standin_server)
    point_at(world.a100, standin_server.kubeconfig_path)
    return standin_server


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A ``redis-server`` of this test alone, on a free port (tests.redis_server), running until
    the test stops it or ends."""
    from tests.redis_server import PrivateRedis  # it asks require_service, defined here

    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()
