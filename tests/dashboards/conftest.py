from __future__ import annotations

import pytest

from tests.conftest import World
from tests.dashboards.data import UsageData, write_usage_data


@pytest.fixture
def usage_data(world: World) -> UsageData:
    """Usage rollups, workloads and a GPU node for the dashboards (tests/dashboards/data.py)."""
    return write_usage_data(world)
