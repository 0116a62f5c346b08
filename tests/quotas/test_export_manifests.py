"""GitOps: ``export_manifests`` writes one file per tenant plus the cluster-wide objects, in a
stable order, and a cluster whose backend is a directory gets its pushes there."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from approvals.choices import RequestStatus
from approvals.services import quota_request_approve
from quotas.choices import SyncBackend
from quotas.models import Cluster, SyncOutbox
from quotas.sync import outbox_deliver
from tests.approvals.conftest import file


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*.yaml"))}


def test_the_export_is_per_cluster_per_tenant_and_stable(world, tmp_path):
    call_command("export_manifests", "--out", str(tmp_path))
    first = tree(tmp_path)

    assert "demo-a100/cluster.yaml" in first
    assert {"demo-a100/tenants/team-a.yaml", "demo-h100/tenants/team-b.yaml"} <= set(first)
    team_a = list(yaml.safe_load_all(first["demo-a100/tenants/team-a.yaml"]))
    assert {o["kind"] for o in team_a} >= {"Namespace", "ResourceQuota", "ClusterQueue"}
    assert all(o["metadata"]["labels"]["portal.gpu-quota.io/tenant"] == "team-a" for o in team_a)

    call_command("export_manifests", "--out", str(tmp_path))
    assert tree(tmp_path) == first  # byte for byte: diffs stay small


def test_an_unknown_cluster_is_refused(world, tmp_path):
    with pytest.raises(CommandError, match="no such cluster: nope"):
        call_command("export_manifests", "--out", str(tmp_path), "--cluster", "nope")
    assert not list(tmp_path.iterdir())


def test_a_gitops_cluster_gets_its_pushes_as_files(world, tmp_path):
    Cluster.objects.filter(pk=world.a100.pk).update(
        backend=SyncBackend.MANIFESTS, manifests_dir=str(tmp_path)
    )
    request = file(world)
    quota_request_approve(request=request, approver=world.admin)
    request.refresh_from_db()
    row = SyncOutbox.objects.get(
        tenant=world.team_a, cluster=world.a100, generation=request.approved_generation
    )

    outbox_deliver(outbox_id=row.pk)

    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED
    objects = list(yaml.safe_load_all((tmp_path / "tenants" / "team-a.yaml").read_text()))
    cq = next(o for o in objects if o["kind"] == "ClusterQueue")
    quotas = {
        r["name"]: r
        for g in cq["spec"]["resourceGroups"]
        for f in g["flavors"]
        if f["name"] == "a100-80gb"
        for r in f["resources"]
    }
    assert quotas["nvidia.com/gpu"]["nominalQuota"] == "8"
