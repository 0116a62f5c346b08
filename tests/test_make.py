"""The Makefile's commands beside the README's two: management commands against the demo."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_manage_runs_a_command_with_the_demos_settings(tmp_path):
    # As in a demo checkout: no DEBUG, no SECRET_KEY, no DATABASE_URL in the environment (a
    # bare `manage.py` stops there on purpose); `make manage` gives the command make run's.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env["DATA_DIR"] = str(tmp_path)
    bare = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bare.returncode != 0 and "SECRET_KEY" in bare.stderr
    done = subprocess.run(
        ["make", "-s", "manage", "ARGS=check --deploy --fail-level CRITICAL"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified" in done.stdout + done.stderr
