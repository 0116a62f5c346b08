"""Events: served as core/v1 and events.k8s.io/v1 (the same events through both), listed by
``kubectl get events``, and not made up where upstream records none."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from tests.devcluster.conftest import Kubectl
from tests.devcluster.test_gc import resource
from tests.devcluster.test_identities import NS, create, namespace


@pytest.fixture
def api(admin_client: ApiClient) -> DynamicClient:
    create(admin_client, namespace(NS))
    return DynamicClient(admin_client)


CORE_EVENT = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {"name": "train.1", "namespace": NS},
    "involvedObject": {"kind": "Pod", "name": "train", "namespace": NS, "apiVersion": "v1"},
    "reason": "Preempted",
    "message": "Preempted by a higher priority workload",
    "type": "Warning",
    "source": {"component": "kueue-admission"},
    "count": 2,
    "firstTimestamp": "2026-01-01T00:00:00Z",
    "lastTimestamp": "2026-01-01T00:01:00Z",
}


def test_a_core_event_is_listed_by_kubectl_and_served_as_events_k8s_io(
    api: DynamicClient,
    kubectl: Kubectl,
) -> None:
    resource(api, "Event").create(body=CORE_EVENT, namespace=NS)
    table = kubectl("get", "events", "-n", NS).stdout
    assert "Preempted" in table and "Preempted by a higher priority workload" in table
    assert "train" in table
    grouped = resource(api, "Event", "events.k8s.io/v1").get(name="train.1", namespace=NS)
    shown: dict[str, Any] = grouped.to_dict()
    assert shown["apiVersion"] == "events.k8s.io/v1"
    assert shown["note"] == "Preempted by a higher priority workload"
    assert shown["regarding"]["name"] == "train"
    assert shown["deprecatedCount"] == 2
    assert shown["deprecatedSource"] == {"component": "kueue-admission"}
    assert shown["metadata"]["uid"] == stored_uid(api)


def stored_uid(api: DynamicClient) -> str:
    found = resource(api, "Event").get(name="train.1", namespace=NS).to_dict()
    return str(found["metadata"]["uid"])


def test_an_events_k8s_io_event_is_a_core_event_too_and_goes_with_it(
    api: DynamicClient,
    kubectl: Kubectl,
) -> None:
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "job.1", "namespace": NS},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/trainer",
        "reportingInstance": "trainer-0",
        "action": "Scale",
        "reason": "Scaled",
        "note": "scaled to 4 workers",
        "type": "Normal",
        "regarding": {"kind": "Job", "name": "job", "namespace": NS},
    }
    resource(api, "Event", "events.k8s.io/v1").create(body=event, namespace=NS)
    core = json.loads(kubectl("get", "event", "job.1", "-n", NS, "-o", "json").stdout)
    assert core["message"] == "scaled to 4 workers"
    assert core["involvedObject"]["kind"] == "Job"
    assert core["reportingComponent"] == "example.com/trainer"
    kubectl("delete", "event", "job.1", "-n", NS)
    listed = resource(api, "Event", "events.k8s.io/v1").get(namespace=NS).to_dict()["items"]
    assert listed == []


def test_a_refused_pod_records_no_event(
    api: DynamicClient,
    kubectl: Kubectl,
) -> None:
    """Admission refusals are answers, not events (upstream records none)."""
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: team-a}\n"
        "spec: {priorityClassName: missing, containers: [{name: main, image: x}]}\n"
    )
    assert kubectl("create", "-f", "-", stdin=manifest, check=False).returncode == 1
    assert "No resources found" in kubectl("get", "events", "-A").stderr


def test_both_event_apis_are_discovered(kubectl: Kubectl) -> None:
    listed = kubectl("api-resources", "-o", "name").stdout.split()
    assert "events" in listed and "events.events.k8s.io" in listed
