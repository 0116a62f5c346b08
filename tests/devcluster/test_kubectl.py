"""The stand-in through the real kubectl (discovery, OpenAPI v3, client- and server-side apply,
patch, label, edit, delete)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.devcluster.conftest import Kubectl

MANIFEST = """\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels:
    portal.gpu-quota.io/tenant: team-a
---
apiVersion: v1
kind: ResourceQuota
metadata:
  name: gpu
  namespace: team-a
spec:
  hard:
    requests.nvidia.com/gpu: "4"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: team-a
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: a100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 4
"""


def get_json(kubectl: Kubectl, *args: str) -> dict[str, Any]:
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def test_get_on_an_empty_cluster(kubectl: Kubectl) -> None:
    result = kubectl("get", "clusterqueues")
    assert result.stdout == "" and "No resources found" in result.stderr
    assert "No resources found" in kubectl("get", "-A", "resourcequotas").stderr
    namespaces = kubectl("get", "namespaces").stdout
    assert "default" in namespaces and "kube-system" in namespaces
    resources = kubectl("api-resources").stdout
    assert "clusterqueues" in resources and "scheduling.volcano.sh/v1beta1" in resources
    assert "kueue.x-k8s.io/v1beta2" in kubectl("api-versions").stdout


def test_apply_get_patch_label_delete(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "team-a.yaml"
    manifest.write_text(MANIFEST)
    applied = kubectl("apply", "-f", str(manifest)).stdout
    assert "namespace/team-a created" in applied
    assert "resourcequota/gpu created" in applied
    assert "clusterqueue.kueue.x-k8s.io/team-a created" in applied

    cq = get_json(kubectl, "clusterqueue", "team-a")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == 4
    assert "kubectl.kubernetes.io/last-applied-configuration" in cq["metadata"]["annotations"]
    quotas = get_json(kubectl, "-A", "resourcequotas")
    assert [q["metadata"]["namespace"] for q in quotas["items"]] == ["team-a"]
    table = kubectl("get", "cq").stdout.splitlines()
    assert table[0].split()[:2] == ["NAME", "COHORT"] and table[1].startswith("team-a")

    # A second client-side apply patches (strategic merge for built-ins, merge for CRDs).
    manifest.write_text(
        MANIFEST.replace('"4"', '"8"').replace("nominalQuota: 4", "nominalQuota: 6")
    )
    again = kubectl("apply", "-f", str(manifest)).stdout
    assert "namespace/team-a unchanged" in again and "resourcequota/gpu configured" in again
    assert get_json(kubectl, "-n", "team-a", "quota", "gpu")["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8"
    }

    kubectl("patch", "cq", "team-a", "--type", "merge", "-p", '{"spec":{"cohortName":"gpus"}}')
    kubectl("label", "cq", "team-a", "tier=gold")
    kubectl("label", "ns", "team-a", "tier=gold")
    cq = get_json(kubectl, "cq", "team-a")
    assert cq["spec"]["cohortName"] == "gpus" and cq["metadata"]["labels"] == {"tier": "gold"}
    assert cq["metadata"]["generation"] == 3
    assert [n["metadata"]["name"] for n in get_json(kubectl, "ns", "-l", "tier=gold")["items"]] == [
        "team-a"
    ]
    assert "team-a" in kubectl("get", "cq", "-l", "tier in (gold, silver)").stdout
    assert "No resources found" in kubectl("get", "cq", "-l", "!tier").stderr

    # kubectl edit sends a merge patch for a custom resource.
    editor = f"{sys.executable} -c \"import sys,pathlib; p=pathlib.Path(sys.argv[1]); p.write_text(p.read_text().replace('cohortName: gpus', 'cohortName: shared'))\""
    kubectl("edit", "cq", "team-a", KUBE_EDITOR=editor)
    assert get_json(kubectl, "cq", "team-a")["spec"]["cohortName"] == "shared"

    deleted = kubectl("delete", "-f", str(manifest), "--ignore-not-found").stdout
    assert 'namespace "team-a" deleted' in deleted
    assert "No resources found" in kubectl("get", "cq").stderr
    assert "No resources found" in kubectl("get", "-A", "quota").stderr


def test_server_side_apply_conflicts_and_force(kubectl: Kubectl, tmp_path: Path) -> None:
    manifest = tmp_path / "team-a.yaml"
    manifest.write_text(MANIFEST)
    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", str(manifest)).stdout
    kubectl("patch", "cq", "team-a", "--type", "merge", "-p", '{"spec":{"stopPolicy":"Hold"}}')
    manifest.write_text(MANIFEST + "  stopPolicy: None\n")
    refused = kubectl("apply", "--server-side", "-f", str(manifest), check=False)
    assert refused.returncode != 0
    assert (
        'conflict with "kubectl-patch"' in refused.stderr and ".spec.stopPolicy" in refused.stderr
    )
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    cq = get_json(kubectl, "cq", "team-a", "--show-managed-fields")
    assert cq["spec"]["stopPolicy"] == "None"
    assert {e["manager"] for e in cq["metadata"]["managedFields"]} == {"kubectl"}


def test_get_resourcequota_prints_used_over_hard_as_upstream(kubectl: Kubectl) -> None:
    """``kubectl get resourcequota`` shows what a quota holds (upstream's Request and Limit
    columns: ``name: used/hard``, ``limits.*`` apart), so a pod counted by a scoped quota is
    seen at a glance."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rq"}}
    kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "gpus", "namespace": "rq"},
                "spec": {"hard": {"requests.nvidia.com/gpu": "5", "limits.cpu": "2", "pods": "4"}},
            }
        ),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "rq"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "trainer",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "500m"}},
                }
            ]
        },
    }
    kubectl("create", "-f", "-", stdin=json.dumps(pod))
    out = kubectl("get", "resourcequota", "gpus", "-n", "rq").stdout
    header, row = out.strip().splitlines()
    assert header.split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    assert "pods: 1/4, requests.nvidia.com/gpu: 1/5" in row
    assert row.rstrip().endswith("limits.cpu: 500m/2")
    # -o wide and -A print the same server-side columns (kubectl adds NAMESPACE).
    header, row = kubectl("get", "resourcequota", "-A", "-o", "wide").stdout.strip().splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "AGE", "REQUEST", "LIMIT"]
    assert "pods: 1/4, requests.nvidia.com/gpu: 1/5" in row
    assert row.rstrip().endswith("limits.cpu: 500m/2")


def test_explain_reads_kubernetes_own_schemas_for_the_core_kinds(kubectl: Kubectl) -> None:
    """``kubectl explain`` of a built-in kind answers from the OpenAPI v3 document with
    Kubernetes' own schemas and descriptions, as a real server's does."""
    hard = kubectl("explain", "resourcequota.spec.hard").stdout
    assert "FIELD: hard <map[string]Quantity>" in hard
    assert "hard is the set of desired hard limits for each named resource" in hard
    limits = kubectl("explain", "limitrange.spec.limits").stdout
    assert "FIELD: limits <[]LimitRangeItem>" in limits
    assert "defaultRequest\t<map[string]Quantity>" in limits
    phase = kubectl("explain", "namespace.status.phase").stdout
    assert "FIELD: phase <string>" in phase and "lifecycle phase of the namespace" in phase
    # The custom resources keep their CRD schema.
    assert "GROUP:      kueue.x-k8s.io" in kubectl("explain", "clusterqueue.spec").stdout


def test_wait_for_jsonpath_uses_a_watch_with_initial_events(kubectl: Kubectl) -> None:
    """``kubectl wait --for=jsonpath=...`` watches with ``sendInitialEvents=true``: the current
    objects, then the BOOKMARK annotated ``k8s.io/initial-events-end``, as Kubernetes sends."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "waits"}}
    kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
    waited = kubectl(
        "wait", "--for=jsonpath={.status.phase}=Active", "namespace/waits", "--timeout=10s"
    )
    assert "namespace/waits condition met" in waited.stdout

    query = (
        "/api/v1/namespaces?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan&timeoutSeconds=1&fieldSelector=metadata.name%3Dwaits"
    )
    events = [json.loads(line) for line in kubectl("get", "--raw", query).stdout.splitlines()]
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]
    assert bookmark["kind"] == "Namespace"
    assert bookmark["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(bookmark["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )

    refused = kubectl(
        "get", "--raw", "/api/v1/namespaces?watch=true&sendInitialEvents=true", check=False
    )
    assert refused.returncode != 0
    assert (
        "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
        "resourceVersionMatch to NotOlderThan" in refused.stderr
    )


def test_quota_charges_resized_pods_and_whole_millicores(kubectl: Kubectl) -> None:
    """Quota usage counts a resized container at max(spec, status resources), as Kubernetes'
    evaluator (UseStatusResources) does, and CPU in whole milli-cores rounded up."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rs"}},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "cpu", "namespace": "rs"},
            "spec": {"hard": {"requests.cpu": "4", "limits.cpu": "8", "requests.memory": "4Gi"}},
        },
    ]
    for obj in objects:
        kubectl("apply", "-f", "-", stdin=json.dumps(obj))

    def pod(name: str, resources: dict[str, Any]) -> str:
        container = {"name": "main", "image": "trainer", "resources": resources}
        metadata = {"name": name, "namespace": "rs"}
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {"containers": [container]},
            }
        )

    kubectl(
        "create",
        "-f",
        "-",
        stdin=pod(
            "resized",
            {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}},
        ),
    )
    resized_status = {
        "containerStatuses": [
            {
                "name": "main",
                "image": "trainer",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "resources": {
                    "requests": {"cpu": "1500m", "memory": "512Mi"},
                    "limits": {"cpu": "2"},
                },
            }
        ]
    }
    kubectl(
        "patch", "pod", "resized", "-n", "rs", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": resized_status}),
    )  # fmt: skip
    kubectl(
        "create",
        "-f",
        "-",
        stdin=pod("tiny", {"requests": {"cpu": "1n", "memory": "1Mi"}, "limits": {"cpu": "1n"}}),
    )
    used = get_json(kubectl, "resourcequota", "cpu", "-n", "rs")["status"]["used"]
    # 1500m (status) + 1m (1n rounded up); memory: max(1Gi spec, 512Mi status) + 1Mi.
    assert used["requests.cpu"] == "1501m"
    assert used["limits.cpu"] == "2001m"
    assert used["requests.memory"] == "1025Mi"


def test_a_pod_with_an_ephemeral_container_carrying_resources_is_refused(kubectl: Kubectl) -> None:
    """Kubernetes refuses resources (and ports, probes, lifecycle) on an ephemeral container."""
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "eph"}}),
    )
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "debugged", "namespace": "eph"},
        "spec": {
            "containers": [{"name": "main", "image": "trainer"}],
            "ephemeralContainers": [
                {
                    "name": "debugger",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    refused = kubectl("create", "-f", "-", stdin=json.dumps(pod), check=False)
    assert refused.returncode != 0
    assert (
        'Pod "debugged" is invalid: spec.ephemeralContainers[0].resources: Forbidden: cannot be '
        "set for an Ephemeral Container" in refused.stderr
    )
    assert "No resources found" in kubectl("get", "pods", "-n", "eph").stderr

    del pod["spec"]["ephemeralContainers"][0]["resources"]
    assert "pod/debugged created" in kubectl("create", "-f", "-", stdin=json.dumps(pod)).stdout
