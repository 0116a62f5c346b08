"""The applier's namespace guard, without Django: namespaces the guard calls reserved get
nothing written and nothing pruned, a namespace that exists without the portal's label is left
alone unless adopted, a backend that cannot read (a folder of YAML) is never asked, and a
tenant pass releases a namespace it no longer wants on a live cluster only. Against the
stand-in with Django: tests/quotas/test_namespaces_push.py."""

from __future__ import annotations

from typing import Any

from quotas.kube import compiler, portal_access
from quotas.kube.applier import (
    ApplyError,
    ManifestsBackend,
    NamespaceGuard,
    Scope,
    apply_objects,
)
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
        self.headers: dict[str, dict[str, str]] = {}

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

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, headers: Any = None
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])
        self.writes.append(f"{key[1]} {key[2]}/{key[3]}")
        if headers:
            self.headers[f"{key[1]} {key[2]}/{key[3]}"] = dict(headers)
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
    owned = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: "demo-a100", LABEL_TENANT: "team-a"}
    backend = Live({"team-a": owned})
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


# --- the portal's own RoleBinding of each namespace -------------------------------------------


def test_the_portals_binding_is_written_as_the_binder_right_after_the_namespaces():
    backend = Live()
    result = apply_objects(
        backend, desired(), Scope("demo-a100", tenant="team-a"), guard=NamespaceGuard(reserved)
    )
    assert not result.failed
    own = [f"RoleBinding {ns}/{portal_access.ROLE_BINDING}" for ns in ("team-a", "team-a-batch")]
    namespaces = ["Namespace /team-a", "Namespace /team-a-batch"]
    assert backend.writes[:4] == namespaces + own
    binder = {portal_access.IMPERSONATE_USER: portal_access.BINDER_USERNAME}
    assert backend.headers == {key: binder for key in own}
    # The RoleBinding pass writes the tenant's bindings only, as the portal.
    later = [w for w in backend.writes[4:] if w.startswith("RoleBinding ")]
    assert later and not [w for w in later if w.endswith("/" + portal_access.ROLE_BINDING)]


def test_a_refused_binding_keeps_everything_else_out_of_its_namespace():
    class Refusing(Live):
        def apply(self, obj, *, dry_run=False, headers=None):  # type: ignore[no-untyped-def]
            if headers and obj["metadata"]["namespace"] == "team-a-batch":
                raise ApplyError("the binder may not", status=403)
            return super().apply(obj, dry_run=dry_run, headers=headers)

    backend = Refusing()
    result = apply_objects(backend, desired(), Scope("demo-a100", tenant="team-a"))
    assert [(key[1], key[2]) for key, _ in result.failed] == [("RoleBinding", "team-a-batch")]
    assert not [w for w in backend.writes if " team-a-batch/" in w]
    assert any("the cluster refused the portal's RoleBinding there" in s for s in result.skipped)


def test_the_portals_binding_is_pruned_last_and_only_with_its_namespace():
    backend = Live()
    scope = Scope("demo-a100", tenant="team-a")
    apply_objects(backend, desired(), scope)
    fewer = [
        o
        for o in desired()
        if (o["metadata"].get("namespace") or o["metadata"]["name"]) != "team-a-batch"
    ]
    backend.writes.clear()
    result = apply_objects(backend, fewer, scope)
    deletes = [w for w in backend.writes if w.startswith("delete ")]
    assert deletes[-1] == f"delete RoleBinding team-a-batch/{portal_access.ROLE_BINDING}"
    assert len(deletes) > 1 and all("team-a-batch" in d for d in deletes)
    assert [c.describe() for c in result.released] == ["Namespace team-a-batch"]
    # The kept namespace keeps it.
    assert ("rbac.authorization.k8s.io/v1", "RoleBinding", "team-a", "gpu-quota-portal") in (
        backend.objects
    )


def test_a_failed_prune_keeps_the_portals_binding_for_the_next_pass():
    class Stuck(Live):
        def delete(self, kind, *, namespace, name):  # type: ignore[no-untyped-def]
            if kind.kind == "ResourceQuota":
                raise ApplyError("finalizer", status=422)
            super().delete(kind, namespace=namespace, name=name)

    backend = Stuck()
    scope = Scope("demo-a100", tenant="team-a")
    apply_objects(backend, desired(), scope)
    fewer = [
        o
        for o in desired()
        if "team-a-batch" not in (o["metadata"].get("namespace"), o["metadata"]["name"])
    ]
    result = apply_objects(backend, fewer, scope)
    assert {key[1] for key, _ in result.failed} == {"ResourceQuota"}
    assert ("rbac.authorization.k8s.io/v1", "RoleBinding", "team-a-batch", "gpu-quota-portal") in (
        backend.objects
    )


def test_a_dry_run_does_not_impersonate_and_says_what_it_left_unchecked():
    """The web pods run dry runs with an account that may not impersonate the binder: where
    the portal's binding is still to be written, nothing in that namespace is checked."""
    owned = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: "demo-a100", LABEL_TENANT: "team-a"}
    backend = Live({"team-a": owned})
    result = apply_objects(backend, desired(), Scope("demo-a100", tenant="team-a"), dry_run=True)
    assert backend.headers == {}
    assert not [w for w in backend.writes if " team-a/" in w]
    assert (
        f"RoleBinding team-a/{portal_access.ROLE_BINDING} not checked: the push writes it as the binder"
        in result.skipped
    )
    assert any(
        s.startswith("ResourceQuota team-a/") and "the portal's RoleBinding in its namespace" in s
        for s in result.skipped
    )
    assert any("its namespace does not exist yet" in s for s in result.skipped)  # team-a-batch
