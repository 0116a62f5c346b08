"""gunicorn's workers import ``portal.wsgi`` before taking connections: the URLconf and every
view behind it are imported then, not by the first request (which, under load, held up every
request that came in meanwhile), and the objects of the start are frozen out of the garbage
collector's full passes. Checked in a fresh process: this one has imported everything already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import gc, sys
before = {name for name in sys.modules}
import portal.wsgi
print(*sorted(name for name in ('portal.urls', 'gpu_agent.agent_api.views', 'approvals.views',
                                'tenants.api.views') if name in sys.modules and name not in before))
print(gc.get_freeze_count() > 1000)
"""


def test_importing_the_wsgi_module_readies_the_urlconf_and_freezes_the_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings.demo", DATA_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", CODE], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    modules, frozen = result.stdout.splitlines()
    assert modules.split() == [
        "approvals.views", "gpu_agent.agent_api.views", "portal.urls", "tenants.api.views"
    ]  # fmt: skip
    assert frozen == "True"
