"""The Priority admission plugin: a pod's ``spec.priority`` comes from its PriorityClass (or the
global default), a missing class or a hand-set priority is refused with the API server's words,
and ResourceQuota PriorityClass scopes see the class Priority admission defaulted."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ForbiddenError

from devcluster import Handle
from tests.devcluster.conftest import Kubectl
from tests.devcluster.test_admission import (
    NS,
    kind,
    pod,
    priority_class,
    refusal,
    resource_quota,
)

SCHEDULING = "scheduling.k8s.io/v1"


@pytest.fixture
def api(dynamic: DynamicClient, devcluster: Handle) -> DynamicClient:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    dynamic.resources.get(api_version="v1", kind="Namespace").create(body=namespace)
    return dynamic


def classes(api: DynamicClient, *objects: dict[str, Any]) -> None:
    for obj in objects:
        kind(api, "PriorityClass", SCHEDULING).create(body=obj)


def created(api: DynamicClient, body: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = kind(api, "Pod").create(body=body, namespace=NS).to_dict()["spec"]
    return spec


def test_a_pods_priority_comes_from_its_class(api: DynamicClient) -> None:
    classes(api, priority_class("production", 100000, preemptionPolicy="Never"))
    spec = created(api, pod("serve", priority_class="production"))
    assert spec["priority"] == 100000
    assert spec["preemptionPolicy"] == "Never"
    assert spec["priorityClassName"] == "production"


def test_without_a_class_the_global_default_or_zero(api: DynamicClient) -> None:
    spec = created(api, pod("plain"))
    assert spec["priority"] == 0
    assert spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert "priorityClassName" not in spec
    classes(
        api,
        priority_class("batch", 10, globalDefault=True),
        priority_class("production", 1000),
    )
    spec = created(api, pod("defaulted"))
    assert (spec["priorityClassName"], spec["priority"]) == ("batch", 10)


def test_a_missing_class_is_refused(api: DynamicClient, kubectl: Kubectl) -> None:
    with pytest.raises(ForbiddenError) as error:
        created(api, pod("p", priority_class="foo"))
    assert refusal(error)["message"] == (
        'pods "p" is forbidden: no PriorityClass with name foo was found'
    )
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: q, namespace: team-a}\n"
        "spec: {priorityClassName: foo, containers: [{name: main, image: x}]}\n"
    )
    result = kubectl("create", "-f", "-", stdin=manifest, check=False)
    assert result.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": pods "q" is forbidden: no '
        "PriorityClass with name foo was found"
    )


def test_a_priority_set_by_hand_is_refused(api: DynamicClient) -> None:
    """Nobody jumps the queue by writing spec.priority."""
    body = pod("sneaky")
    body["spec"]["priority"] = 1000000
    with pytest.raises(ForbiddenError) as error:
        created(api, body)
    assert refusal(error)["message"] == (
        'pods "sneaky" is forbidden: the integer value of priority (1000000) must not be provided '
        "in pod spec; priority admission controller computed 0 from the given PriorityClass name"
    )
    classes(api, priority_class("production", 1000, preemptionPolicy="Never"))
    body = pod("honest", priority_class="production")
    body["spec"]["priority"] = 1000  # the same as computed: accepted
    assert created(api, body)["priority"] == 1000
    body = pod("preempting", priority_class="production")
    body["spec"]["preemptionPolicy"] = "PreemptLowerPriority"
    with pytest.raises(ForbiddenError) as error:
        created(api, body)
    assert refusal(error)["message"] == (
        'pods "preempting" is forbidden: the string value of PreemptionPolicy '
        "(PreemptLowerPriority) must not be provided in pod spec; priority admission controller "
        "computed Never from the given PriorityClass name"
    )


def test_quota_scopes_see_the_defaulted_class(api: DynamicClient) -> None:
    """Priority runs before ResourceQuota: a pod without a class counts in the default's."""
    classes(api, priority_class("batch", 10, globalDefault=True))
    kind(api, "ResourceQuota").create(
        body=resource_quota("batch-gpus", {"requests.nvidia.com/gpu": "2"}, ["batch"]),
        namespace=NS,
    )
    created(api, pod("first", 2))
    with pytest.raises(ForbiddenError) as error:
        created(api, pod("second", 1))
    assert (
        "exceeded quota: batch-gpus, requested: requests.nvidia.com/gpu=1"
        in (refusal(error)["message"])
    )
