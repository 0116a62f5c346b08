"""Upgrading from the previous release keeps every row and leaves the data usable.

The child process migrates an empty database to the release's schema, fills it through that
schema's models, migrates it to today's, then reads and approves through today's services.
"""

from __future__ import annotations

import json

from tests.ops.conftest import run_python
from tests.ops.releases import PREVIOUS, RELEASES


def test_previous_release_upgrades_with_its_data(scratch_db) -> None:  # type: ignore[no-untyped-def]
    url = scratch_db("upgrade")

    seen = json.loads(run_python(url, "-m", "tests.ops.forward", PREVIOUS).splitlines()[-1])

    assert seen["users"] == ["admin", "alice", "bob"]
    # The request pending before the upgrade is approved after it, as the next generation.
    assert seen["requests"] == {
        "paper deadline": "applied",
        "new model family": "approved",
        "more": "rejected",
    }
    assert seen["approved_status"] == "approved"
    assert seen["team_a_generation"] == 3
    assert seen["team_a_gpus"] == ["7.000/10.000"]
    # Tokens issued before the upgrade still authenticate (hashes kept, nothing re-issued).
    assert seen["api_token_user"] == "alice"
    assert seen["node_token_node"] == "gpu-node-1"
    assert [tuple(x) for x in seen["layouts"]] == [(1, "success")]
    # The guarantees' running totals: filled from the rows (team-a 6 + team-b 4 A100s, 32 + 32
    # CPUs), then kept by the approval (team-a 6 -> 7).
    assert seen["guarantees"] == ["cpu 64.000", "nvidia.com/gpu 11.000"]


def test_every_release_names_only_migrations_that_exist() -> None:
    from django.db.migrations.loader import MigrationLoader

    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    for release, leaves in RELEASES.items():
        for app, name in leaves.items():
            assert (app, name) in graph.nodes, f"{release}: {app}.{name} is not a migration"
