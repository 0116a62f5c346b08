"""The agent runs on GPU nodes without the portal: importing it, and ``python -m
gpu_node_agent --help`` (what the ``gpu-node-agent`` command runs), load no Django module (checked in fresh interpreters)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AGENT_MODULES = [
    "gpu_node_agent",
    "gpu_node_agent.backend",
    "gpu_node_agent.nvml",
    "gpu_node_agent.testing.simnvml",
    "gpu_node_agent.testing.fake",
    "gpu_node_agent.apply",
    "gpu_node_agent.pods",
    "gpu_node_agent.runner",
]


def _environment() -> dict[str, str]:
    # The installed distribution, as on a node: no PYTHONPATH, not run from the repository.
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO", "GPU_AGENT")) and k != "PYTHONPATH"
    }


def test_importing_the_agent_loads_no_django() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {AGENT_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not loaded, loaded\n"
        "assert 'pynvml' not in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parent,
        env=_environment(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_command_line_help_loads_no_django() -> None:
    # -X importtime lists every module the interpreter imports, on stderr.
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpu_node_agent", "--help"],
        cwd=Path(__file__).parent,
        env=_environment(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "--portal" in done.stdout and "--fake-gpus" in done.stdout
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line]
    assert "gpu_node_agent.runner" in imported
    assert not [name for name in imported if name == "django" or name.startswith("django.")]
    assert "pynvml" not in imported
