"""The applier's namespace guard, without Django: namespaces the guard calls reserved get
nothing written and nothing pruned, a namespace that exists without the portal's label is left
alone unless adopted, a backend that cannot read (a folder of YAML) is never asked, and a
tenant pass releases a namespace it no longer wants on a live cluster only. Against the
stand-in with Django: tests/quotas/test_namespaces_push.py."""

from __future__ import annotations

from typing import Any

from quotas.kube import compiler
from quotas.kube.applier import ManifestsBackend, NamespaceGuard, Scope, apply_objects
from quotas.kube.resources import Kind
from quotas.kube.spec import LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY
from tests.kube.test_applier import cluster, tenant


def reserved(name: str) -> str | None:
    return f"{name} is a system namespace" if name.startswith("kube-") else None


class Live:
    """An in-memory cluster that reads: what was written, and namespaces made by hand."""

    def __init__(self, existing: dict[str, dict[str, str]] | None = None) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        for name, labels in (existing or {}).items():
            meta = {"name": name, "labels": labels}
            self.objects[("v1", "Namespace", "", name)] = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": meta,
            }
        self.writes: list[str] = []

    def list_owned(self, kind: Kind, selector: str) -> list[dict[str, Any]]:
        wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        return [
            obj
            for key, obj in self.objects.items()
            if key[:2] == (kind.api_version, kind.kind)
            and all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]

    def read(self, kind: Kind, *, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind.api_version, kind.kind, namespace or "", name))

    def apply(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])
        self.writes.append(f"{key[1]} {key[2]}/{key[3]}")
        if not dry_run:
            self.objects[key] = obj
        return obj

    def delete(self, kind: Kind, *, namespace: str | None, name: str) -> None:
        self.writes.append(f"delete {kind.kind} {namespace}/{name}")
        self.objects.pop((kind.api_version, kind.kind, namespace or "", name), None)

    def close(self) -> None:
        pass


def desired(slug: str = "team-a") -> list[dict[str, Any]]:
    return compiler.compile_tenant(cluster(has_kueue=False), tenant(slug))


def test_a_reserved_namespace_gets_nothing():
    backend = Live()
    objects = desired("kube-x")  # namespaces kube-x and kube-x-batch
    result = apply_objects(
        backend, objects, Scope("demo-a100", tenant="kube-x"), guard=NamespaceGuard(reserved)
    )
    assert backend.writes == []
    assert sorted(key[3] for key, _ in result.failed) == ["kube-x", "kube-x-batch"]
    assert all("system namespace" in message for _, message in result.failed)


def test_a_namespace_made_by_hand_waits_for_adoption():
    foreign = {"team-a": {"owner": "platform"}}
    backend = Live(foreign)
    guard = NamespaceGuard(reserved, cluster="demo-a100")
    result = apply_objects(backend, desired(), Scope("demo-a100", tenant="team-a"), guard=guard)
    assert not any(" team-a/" in write or write.endswith(" /team-a") for write in backend.writes)
    assert any(" team-a-batch/" in write for write in backend.writes)
    [(key, message)] = result.failed
    assert key[1:] == ("Namespace", "", "team-a")
    assert "namespace team-a exists on demo-a100 and the portal did not create it" in message

    adopted = NamespaceGuard(reserved, adopted=frozenset({"team-a"}), cluster="demo-a100")
    result = apply_objects(backend, desired(), Scope("demo-a100", tenant="team-a"), guard=adopted)
    assert not result.failed
    labels = backend.read(
        Kind("v1", "Namespace", "namespaces", False), namespace=None, name="team-a"
    )
    assert labels is not None and labels["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY


def test_a_namespace_the_portal_labelled_is_its_own():
    backend = Live({"team-a": {LABEL_MANAGED_BY: MANAGED_BY}})
    result = apply_objects(
        backend, desired(), Scope("demo-a100", tenant="team-a"), guard=NamespaceGuard(reserved)
    )
    assert not result.failed


def test_a_folder_of_yaml_is_not_asked_and_keeps_its_namespaces(tmp_path):
    backend = ManifestsBackend(tmp_path)
    scope = Scope("demo-a100", tenant="team-a")
    guard = NamespaceGuard(reserved)
    assert not apply_objects(backend, desired(), scope, guard=guard).failed
    fewer = [
        o
        for o in desired()
        if (o["metadata"].get("namespace") or o["metadata"]["name"]) != "team-a-batch"
    ]
    result = apply_objects(backend, fewer, scope, guard=guard)
    assert result.released == []
    assert any(c.key[1] == "ResourceQuota" and c.key[2] == "team-a-batch" for c in result.pruned)


def test_a_live_cluster_releases_a_namespace_no_longer_wanted():
    backend = Live()
    scope = Scope("demo-a100", tenant="team-a")
    apply_objects(backend, desired(), scope, guard=NamespaceGuard(reserved))
    fewer = [
        o
        for o in desired()
        if (o["metadata"].get("namespace") or o["metadata"]["name"]) != "team-a-batch"
    ]
    result = apply_objects(backend, fewer, scope, guard=NamespaceGuard(reserved))
    assert [c.describe() for c in result.released] == ["Namespace team-a-batch"]
    namespace = backend.objects[("v1", "Namespace", "", "team-a-batch")]  # never deleted
    assert "labels" not in namespace["metadata"]
    assert "released" in result.summary()


def _config_map(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {"config.yaml": "version: v1\n"},
    }


def operator_reserved(name: str) -> str | None:
    return f"{name} is a system namespace" if name in {"gpu-operator", "kube-system"} else None


def test_the_portals_cluster_level_objects_in_a_system_namespace_are_not_the_guards():
    """The time-slicing ConfigMap (no tenant label) is written into gpu-operator, which the
    guard reserves: the guard is about tenants' namespaces; RBAC and the admission policy hold
    the portal to its two ConfigMaps there by name."""
    backend = Live({"gpu-operator": {}})
    owned = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: "demo-a100"}
    shared = _config_map("gpu-operator", "gpu-portal-time-slicing", owned)
    result = apply_objects(
        backend, [shared], Scope("demo-a100"), guard=NamespaceGuard(operator_reserved)
    )
    assert result.failed == []
    assert backend.writes == ["ConfigMap gpu-operator/gpu-portal-time-slicing"]
    # Still the portal's: a later full pass that no longer wants it prunes it.
    result = apply_objects(backend, [], Scope("demo-a100"), guard=NamespaceGuard(operator_reserved))
    assert [c.describe() for c in result.pruned] == [
        "ConfigMap gpu-operator/gpu-portal-time-slicing"
    ]


def test_a_tenants_object_never_enters_a_reserved_namespace_beside_the_portals_own():
    """A tenant-labelled object in a reserved namespace is refused even without its Namespace
    in the pass, and the portal's unlabelled ConfigMap beside it is written all the same."""
    backend = Live({"gpu-operator": {}})
    owned = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: "demo-a100"}
    shared = _config_map("gpu-operator", "gpu-portal-time-slicing", owned)
    smuggled = _config_map("gpu-operator", "team-a-config", {**owned, LABEL_TENANT: "team-a"})
    quota = next(o for o in desired() if o["kind"] == "ResourceQuota")
    in_kube_system = {**quota, "metadata": {**quota["metadata"], "namespace": "kube-system"}}
    result = apply_objects(
        backend,
        [shared, smuggled, in_kube_system],
        Scope("demo-a100"),
        guard=NamespaceGuard(operator_reserved),
    )
    assert backend.writes == ["ConfigMap gpu-operator/gpu-portal-time-slicing"]
    assert sorted(key[3] for key, _ in result.failed) == ["gpu-operator", "kube-system"]
    assert all("system namespace" in message for _, message in result.failed)
