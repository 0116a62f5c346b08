"""Ways to run the stand-in: a thread with its state on disk, a child process, https."""

from __future__ import annotations

import json
import shutil
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config
from kubernetes.client import ApiException, CoreV1Api

from devcluster import start_in_subprocess, start_in_thread
from tests.conftest import require_service
from tests.devcluster.conftest import make_kubectl


def config_map(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}


def refuse_bad(obj: dict[str, Any]) -> list[str]:
    if obj["metadata"]["name"] == "bad":
        return [f"ConfigMap {obj['metadata']['namespace']}/bad: data[a]: refused by the test"]
    return []


def test_state_survives_a_restart_and_the_validator_is_injectable(tmp_path: Path) -> None:
    state, kubeconfig = tmp_path / "state", tmp_path / "kubeconfig"
    with start_in_thread(
        kubeconfig_path=kubeconfig, state_dir=state, validator=refuse_bad
    ) as first:
        core = CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        created = core.create_namespaced_config_map("default", config_map("good"))
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_config_map("default", config_map("bad"))
        status = json.loads(refused.value.body)
        assert refused.value.status == 422 and status["reason"] == "Invalid"
        assert status["details"]["causes"] == [
            {"reason": "FieldValueInvalid", "field": "data[a]", "message": "refused by the test"}
        ]
        token = first.token
    assert (state / "objects.json").exists()

    with start_in_thread(kubeconfig_path=kubeconfig, state_dir=state) as second:
        assert second.token == token  # kept in the state directory
        core = CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        kept = core.read_namespaced_config_map("good", "default")
        assert kept.metadata.uid == created.metadata.uid
        later = core.create_namespaced_config_map("default", config_map("later"))
        assert int(later.metadata.resource_version) > int(created.metadata.resource_version)
        second.reset()
        assert core.list_namespaced_config_map("default").items == []


def test_subprocess_mode_writes_port_and_kubeconfig(tmp_path: Path) -> None:
    state, kubeconfig = tmp_path / "state", tmp_path / "kubeconfig"
    with start_in_subprocess(kubeconfig_path=kubeconfig, state_dir=state) as handle:
        port = int((state / "port").read_text())
        assert handle.url == f"http://127.0.0.1:{port}"
        core = CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        names = [n.metadata.name for n in core.list_namespace().items]
        assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]
        assert handle.stats()["verb_kinds"] == {"list Namespace": 1}
    assert handle.process.returncode == 0
    assert not (state / "port").exists()
    assert (state / "objects.json").exists()


def test_https_sends_the_token(tmp_path: Path) -> None:
    require_service("openssl", shutil.which("openssl") is not None, "needed for --tls")
    kubeconfig = tmp_path / "kubeconfig"
    with start_in_thread(kubeconfig_path=kubeconfig, tls=True) as handle:
        assert handle.url.startswith("https://") and handle.ca_file is not None
        kubectl = make_kubectl(kubeconfig, tmp_path / "cache")
        assert "kube-system" in kubectl("get", "namespaces").stdout
        core = CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        assert len(core.list_namespace().items) == 4
        context = ssl.create_default_context(cafile=handle.ca_file)
        with pytest.raises(urllib.error.HTTPError) as anonymous:
            urllib.request.urlopen(f"{handle.url}/api/v1/namespaces", context=context)  # noqa: S310
        assert anonymous.value.code == 401
