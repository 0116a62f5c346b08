"""The pure reading of a TokenReview's status (gpu_agent.agent_identity): what the API server
answers for a pod-bound projected token, and each way it fails to make its bearer a node agent."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_agent.agent_identity import (
    AgentIdentity,
    IdentityRefused,
    agent_identity,
    pod_node,
    service_account_named,
)

ACCOUNT = ("gpu-agent", "gpu-agent")


def status(**changes: Any) -> dict[str, Any]:
    """A TokenReview status as Kubernetes 1.30+ answers for a projected, pod-bound token."""
    answer: dict[str, Any] = {
        "authenticated": True,
        "audiences": ["gpu-quota-portal"],
        "user": {
            "username": "system:serviceaccount:gpu-agent:gpu-agent",
            "uid": "sa-uid",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:gpu-agent"],
            "extra": {
                "authentication.kubernetes.io/credential-id": ["JTI=1"],
                "authentication.kubernetes.io/node-name": ["gpu-a"],
                "authentication.kubernetes.io/node-uid": ["node-uid"],
                "authentication.kubernetes.io/pod-name": ["agent-x"],
                "authentication.kubernetes.io/pod-uid": ["pod-uid"],
            },
        },
    }
    answer.update(changes)
    return answer


def identity(answer: dict[str, Any]) -> AgentIdentity:
    return agent_identity(
        answer, audience="gpu-quota-portal", service_account=ACCOUNT, cluster="demo"
    )


def test_a_projected_token_names_its_account_pod_and_node() -> None:
    assert identity(status()) == AgentIdentity(
        "gpu-agent", "gpu-agent", "agent-x", "pod-uid", "gpu-a"
    )


@pytest.mark.parametrize(
    ("answer", "code", "words"),
    [
        ({"authenticated": False, "error": "service account token has expired"}, 401, "expired"),
        ({"authenticated": None, "error": "invalid bearer token"}, 401, "invalid bearer token"),
        ({"audiences": ["https://kubernetes.default.svc.cluster.local"]}, 401, "not for audience"),
        ({"user": {"username": "system:serviceaccount:gpu-agent:other"}}, 403, "only the node"),
        ({"user": {"username": "alice"}}, 403, "alice's"),
        ({"user": {"username": "system:serviceaccount:gpu-agent:gpu-agent"}}, 403, "not bound"),
    ],
)
def test_what_does_not_make_a_node_agent(answer: dict[str, Any], code: int, words: str) -> None:
    with pytest.raises(IdentityRefused) as refused:
        identity(status(**answer))
    assert refused.value.status == code
    assert words in refused.value.message


def test_before_kubernetes_1_30_the_pod_says_where_it_runs() -> None:
    reviewed = status()
    del reviewed["user"]["extra"]["authentication.kubernetes.io/node-name"]
    agent = identity(reviewed)
    assert agent.node == ""
    pod = {"metadata": {"uid": "pod-uid"}, "spec": {"nodeName": "gpu-a"}}
    assert pod_node(pod, agent) == "gpu-a"
    for gone in (None, {"metadata": {"uid": "another-pod"}, "spec": {"nodeName": "gpu-a"}}):
        with pytest.raises(IdentityRefused) as refused:
            pod_node(gone, agent)
        assert refused.value.status == 401
    with pytest.raises(IdentityRefused) as unscheduled:
        pod_node({"metadata": {"uid": "pod-uid"}, "spec": {}}, agent)
    assert unscheduled.value.status == 403


def test_the_service_account_setting_is_namespace_slash_name() -> None:
    assert service_account_named("gpu-agent/gpu-agent") == ACCOUNT
    for bad in ("gpu-agent", "/x", "a/b/c", ""):
        with pytest.raises(ValueError, match="NAMESPACE/NAME"):
            service_account_named(bad)
