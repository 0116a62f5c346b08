"""The installed distribution holds everything the agent runs: every module of gpu_node_agent
but the simulation and demo (``gpu_node_agent.testing``) imports with what gpu-node-agent and
gpu-spec declare. In CI this runs in the clean virtualenv of ``.ci/node-agent`` (only
``pip install ./gpu_spec ./node_agent``), as the image installs them (node_agent/Dockerfile)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_every_module_of_the_agent_imports_from_the_installed_distribution() -> None:
    code = (
        "import importlib, pkgutil, gpu_node_agent\n"
        "names = [m.name for m in pkgutil.walk_packages(gpu_node_agent.__path__, 'gpu_node_agent.')\n"
        "         if not m.name.startswith('gpu_node_agent.testing')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(' '.join(sorted(names)))\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parent,  # not the checkout's source tree
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    imported = set(done.stdout.split())
    assert {
        "gpu_node_agent.runner",
        "gpu_node_agent.nvml",
        "gpu_node_agent.probe",
        "gpu_node_agent.probe_kernel",
        "gpu_node_agent.device_plugin",
    } <= imported
