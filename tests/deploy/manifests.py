"""The Kubernetes manifests under ``deploy/kubernetes/`` as the real ``kubectl kustomize``
renders them (the kubectl the project installs), for the tests beside this file."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
KUBECTL = ROOT / ".venv" / "bin" / "kubectl"
# What the manifests are checked against: the portal's default cluster version (quotas'
# ClusterSpec, the stand-in) and the newest schema kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.33", "1.37")

Obj = dict[str, Any]


def kustomizations() -> list[Path]:
    """Every folder with a kustomization.yaml that is applied as a whole (the overlays):
    base, cluster-access and node-agent are parts of them."""
    return sorted(p.parent for p in (DEPLOY / "overlays").rglob("kustomization.yaml"))


def overlay_id(path: Path) -> str:
    return str(path.relative_to(DEPLOY / "overlays"))


@functools.cache
def render(path: Path) -> tuple[Obj, ...]:
    done = subprocess.run(
        [str(KUBECTL), "kustomize", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"kubectl kustomize {path}: {done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def overlay(name: str) -> tuple[Obj, ...]:
    return render(DEPLOY / "overlays" / name)


def find(objects: tuple[Obj, ...] | list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: found {len(found)}"
    return found[0]


def examples() -> list[Obj]:
    """The example objects kept out of every kustomization (secrets to fill in)."""
    return [
        doc
        for path in sorted(DEPLOY.rglob("*.example.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def pod_spec(obj: Obj) -> Obj:
    return dict(obj["spec"]["template"]["spec"])


def workloads(objects: tuple[Obj, ...]) -> list[Obj]:
    return [o for o in objects if o["kind"] in {"Deployment", "DaemonSet", "Job"}]


def dockerfile_user() -> tuple[int, int]:
    """The uid and gid of the portal image's USER (the Dockerfile at the root)."""
    text = (ROOT / "Dockerfile").read_text()
    match = re.search(r"^USER\s+(\d+):(\d+)\s*$", text, re.MULTILINE)
    assert match, "the Dockerfile's USER is not numeric uid:gid"
    return int(match[1]), int(match[2])


def ingress_backend(ingress: Obj, host: str, path: str) -> Obj:
    """The backend an Ingress sends ``host`` + ``path`` to, by the Ingress API's rules: of the
    paths that match, the longest wins (Exact before Prefix at equal length); a Prefix matches
    whole path elements, so ``/api/v1/agent/`` takes ``/api/v1/agent/report/`` and
    ``/api/v1/agent`` but not ``/api/v1/agents/``."""

    def elements(text: str) -> list[str]:
        return [e for e in text.split("/") if e]

    [rule] = [r for r in ingress["spec"]["rules"] if r.get("host") == host]
    matches = []
    for entry in rule["http"]["paths"]:
        kind = entry["pathType"]
        assert kind in {"Exact", "Prefix"}, f"{entry['path']}: {kind} has no defined matching"
        if kind == "Exact":
            hit = entry["path"] == path
        else:
            prefix = elements(entry["path"])
            hit = elements(path)[: len(prefix)] == prefix
        if hit:
            matches.append(((len(entry["path"]), kind == "Exact"), entry["backend"]))
    if not matches:
        return dict(ingress["spec"]["defaultBackend"])
    return dict(max(matches, key=lambda m: m[0])[1])


def selected(selector: dict[str, str], objects: tuple[Obj, ...] | list[Obj]) -> list[Obj]:
    """The workloads whose pods carry every label of ``selector`` (a Service's, a budget's)."""
    return [
        o
        for o in workloads(tuple(objects))
        if selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
    ]


def kubectl(handle: Any, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real kubectl against a stand-in (``devcluster.runner.Handle``)."""
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(handle.kubeconfig_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def discovery(handle: Any) -> dict[tuple[str, str], str]:
    """(group, kind) -> resource name, for every kind the stand-in serves, read from its
    discovery documents with ``kubectl get --raw`` as any client would."""
    import json

    def raw(path: str) -> Any:
        done = kubectl(handle, "get", "--raw", path)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    lists = [("", raw("/api/v1"))]
    for group in raw("/apis")["groups"]:
        version = group["preferredVersion"]["groupVersion"]
        lists.append((group["name"], raw(f"/apis/{version}")))
    return {
        (group, resource["kind"]): resource["name"]
        for group, found in lists
        for resource in found["resources"]
        if "/" not in resource["name"]  # subresources (status)
    }
