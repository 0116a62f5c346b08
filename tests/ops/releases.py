"""The migration state of each release, so an upgrade from it can be tested with data.

Before a release, add its leaf migrations here (``manage.py showmigrations --plan`` shows
them) and a writer in ``tests/ops/forward.py`` that fills that schema with data.
"""

from __future__ import annotations

# The last landed submission before the usage, probe and GPU Operator work.
PREVIOUS = "2026.12.03"

RELEASES: dict[str, dict[str, str]] = {
    "2026.12.03": {
        "tenants": "0003_notification",
        "quotas": "0004_cluster_sync",
        "approvals": "0002_request_tier",
        "gpu_agent": "0001_initial",
    },
}
