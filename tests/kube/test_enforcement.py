"""The pure parts of enforcement: reading Kueue's configuration, what it manages, the policy's
place in the compiled objects, and the namespace split."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest

from quotas.kube import compiler, enforcement
from quotas.kube.cel import evaluate
from quotas.kube.enforcement import KueueConfig, parse_kueue_config, split_shares
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from quotas.kube.validate import validate_objects


def configmap(text: str) -> dict:
    return {"data": {"controller_manager_config.yaml": text}}


def test_kueues_configuration_is_read_as_kueue_reads_it():
    config = parse_kueue_config(
        configmap(
            """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: queues
manageJobsWithoutQueueName: true
managedJobsNamespaceSelector:
  matchLabels: {team: ml}
integrations:
  frameworks: [batch/job, pod, statefulset]
"""
        )
    )
    assert config.frameworks == {"batch/job", "pod", "statefulset"}
    assert config.manage_without_queue_name is True
    assert config.namespace_selector == {"matchLabels": {"team": "ml"}}
    assert config.namespace == "queues"
    assert KueueConfig.from_json(config.as_json()) == config
    # Kueue's defaults: batch/job only, work without a queue name left alone.
    default = parse_kueue_config(configmap("kind: Configuration\n"))
    assert default.frameworks == {"batch/job"}
    assert default.manage_without_queue_name is False


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({}, "no 'controller_manager_config.yaml' key"),
        ({"controller_manager_config.yaml": "[1, 2"}, "not YAML"),
        ({"controller_manager_config.yaml": "- a\n- b\n"}, "not a mapping"),
        ({"controller_manager_config.yaml": "integrations: {frameworks: pod}"}, "frameworks"),
        ({"controller_manager_config.yaml": "manageJobsWithoutQueueName: maybe"}, "true or false"),
    ],
)
def test_a_configuration_that_cannot_be_read_says_why(data, words):
    with pytest.raises(ValueError, match=words):
        parse_kueue_config({"data": data})


@pytest.mark.parametrize(
    ("kind", "frameworks", "without", "labelled", "selected", "managed"),
    [
        ("Job", {"batch/job"}, False, True, False, True),  # the label is enough for jobs
        ("Job", {"batch/job"}, False, False, True, False),
        ("Job", {"batch/job"}, True, False, True, True),
        ("Job", {"batch/job"}, True, False, False, False),  # the selector exempts
        ("Pod", {"batch/job"}, True, True, True, False),  # no pod integration
        ("Pod", {"pod"}, False, True, False, False),  # pod-based: strong exemption
        ("Pod", {"pod"}, False, True, True, True),
        ("Deployment", {"deployment"}, False, True, True, False),  # needs pod too
        ("Deployment", {"deployment", "pod"}, False, True, True, True),
        ("CronJob", {"batch/job"}, False, True, True, True),
        ("ReplicaSet", {"batch/job", "pod", "deployment"}, True, True, True, False),
        ("DaemonSet", {"batch/job", "pod"}, True, True, True, False),
    ],
)
def test_what_kueue_manages(kind, frameworks, without, labelled, selected, managed):
    config = KueueConfig(frozenset(frameworks), manage_without_queue_name=without)
    assert config.manages(kind, labelled=labelled, namespace_selected=selected) is managed


FLAVORS = (FlavorSpec("a100", "gpu", {"nvidia.com/gpu": Decimal(16)}),)
TEAM = TenantSpec(
    "team-a",
    2,
    (NamespaceSpec("team-a-inference"), NamespaceSpec("team-a-training")),
    (QuotaSpec("a100", "nvidia.com/gpu", Decimal(4), Decimal(10)),),
)


def kinds(cluster: ClusterSpec) -> list[str]:
    return [o["kind"] for o in compiler.compile_cluster(cluster, [TEAM])]


def policies(cluster: ClusterSpec) -> list[str]:
    return sorted(
        o["metadata"]["name"]
        for o in compiler.compile_cluster(cluster, [TEAM])
        if o["kind"] == "ValidatingAdmissionPolicy"
    )


DEVICE_ENV = ["gpu-quota-portal-device-env", "gpu-quota-portal-device-env-keys"]


def test_the_kueue_policy_comes_with_kueue_manages_everything_only_the_device_ones_always():
    kueue = ClusterSpec("c", FLAVORS)
    assert policies(kueue) == [*DEVICE_ENV, "gpu-quota-portal-kueue-only"]
    assert kinds(kueue).count("ValidatingAdmissionPolicyBinding") == 3
    assert validate_objects(compiler.compile_cluster(kueue, [TEAM])) == []
    # and before every namespace's objects, right after the namespaces and priorities
    order = kinds(kueue)
    assert order.index("ValidatingAdmissionPolicy") < order.index("ResourceQuota")
    for other in (
        dataclasses.replace(kueue, enforcement="split"),
        dataclasses.replace(kueue, has_kueue=False),
    ):
        assert policies(other) == DEVICE_ENV
        assert validate_objects(compiler.compile_cluster(other, [TEAM])) == []


def test_kueue_manages_everything_needs_kubernetes_1_30():
    old = ClusterSpec("c", FLAVORS, kubernetes_version="1.29")
    with pytest.raises(ValueError, match=r"1\.30 or later"):
        compiler.compile_cluster(old, [TEAM])
    # Namespace split runs there, without any policy: the verdict says what that leaves open.
    assert policies(dataclasses.replace(old, enforcement="split")) == []


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="enforcement 'loose'"):
        compiler.compile_cluster(ClusterSpec("c", FLAVORS, enforcement="loose"), [TEAM])


def test_every_expression_of_the_policy_compiles_and_a_pod_without_gpus_passes():
    policy = next(
        o
        for o in compiler.compile_cluster(ClusterSpec("c", FLAVORS), [TEAM])
        if o["metadata"]["name"] == "gpu-quota-portal-kueue-only"
    )
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    namespace = {"metadata": {"name": "team-a-training", "labels": {}}}
    values: dict = {}
    for variable in policy["spec"]["variables"]:
        values[variable["name"]] = evaluate(
            variable["expression"],
            {
                "object": pod,
                "namespaceObject": namespace,
                "request": {
                    "namespace": "team-a-training",
                    "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                },
                "variables": values,
            },
        )
    assert values["gpu"] is False
    assert values["tenant"] == "team-a-training"  # no tenant label: the namespace is named
    validation = policy["spec"]["validations"][0]
    assert evaluate(validation["expression"], {"object": pod, "variables": values}) is True


@pytest.mark.parametrize(
    ("total", "weights", "step", "parts"),
    [
        (Decimal(10), [1, 1], Decimal(1), [5, 5]),
        (Decimal(10), [1, 1, 1], Decimal(1), [4, 3, 3]),
        (Decimal(10), [30, 70], Decimal(1), [3, 7]),
        (Decimal(10), ["33.33", "66.67"], Decimal(1), [3, 7]),
        (Decimal(1), [50, 50], Decimal(1), [1, 0]),  # a whole GPU cannot be halved
        (Decimal("1.5"), [1, 1], Decimal("0.001"), [Decimal("0.75"), Decimal("0.75")]),
        (Decimal(0), [1, 1], Decimal(1), [0, 0]),
    ],
)
def test_a_split_adds_up_to_the_total_exactly(total, weights, step, parts):
    split = split_shares(total, [Decimal(w) for w in weights], step=step)
    assert split == [Decimal(p) for p in parts]
    assert sum(split) == total


def test_shares_that_do_not_make_a_whole_stop_the_compiler():
    tenant = dataclasses.replace(
        TEAM,
        namespaces=(
            NamespaceSpec("team-a-inference", share=Decimal(40)),
            NamespaceSpec("team-a-training", share=Decimal(50)),
        ),
    )
    split = ClusterSpec("c", FLAVORS, enforcement="split")
    with pytest.raises(ValueError, match="add up to 90%"):
        compiler.compile_cluster(split, [tenant])
    partial = dataclasses.replace(
        tenant,
        namespaces=(NamespaceSpec("team-a-inference", share=Decimal(40)), TEAM.namespaces[1]),
    )
    with pytest.raises(ValueError, match="'team-a-training' has no quota share"):
        compiler.compile_cluster(split, [partial])
    # Shares do not matter where Kueue adds the namespaces up.
    assert compiler.compile_cluster(ClusterSpec("c", FLAVORS), [tenant])


@pytest.mark.parametrize(
    ("mode", "has_kueue", "config", "bypass"),
    [
        ("split", True, None, "no"),
        ("split", False, None, "no"),
        ("kueue", True, None, "unknown"),
        ("kueue", True, KueueConfig(frozenset({"batch/job"})), "no"),
    ],
)
def test_the_verdict(mode, has_kueue, config, bypass):
    said = enforcement.verdict(mode=mode, has_kueue=has_kueue, config=config, config_error="gone")
    assert said.bypass == bypass
    assert said.lines
    if bypass == "unknown":
        assert "(gone)" in said.lines[0]


def test_the_verdict_names_what_the_policy_refuses():
    config = KueueConfig(frozenset({"batch/job", "pod", "deployment"}))
    lines = enforcement.verdict(mode="kueue", has_kueue=True, config=config).lines
    assert (
        lines[0]
        == "Kueue manages Pods, Jobs, CronJobs and Deployments here (3 integrations enabled)."
    )
    assert lines[2] == (
        "In every tenant namespace the admission policy refuses GPU work Kueue would not manage: "
        "work without a queue name; StatefulSets, ReplicaSets, DaemonSets and "
        "ReplicationControllers that no managed workload created."
    )


def test_split_memory_and_storage_in_whole_mebibytes():
    flavors = (
        FlavorSpec("a100", "gpu", {"nvidia.com/gpu": Decimal(16), "memory": Decimal(2**41)}),
    )
    tenant = dataclasses.replace(
        TEAM,
        quotas=(
            *TEAM.quotas,
            QuotaSpec("a100", "memory", Decimal(0), Decimal(2**40)),
        ),
        storage_bytes=Decimal(2**40),
        namespaces=(
            NamespaceSpec("team-a-inference", share=Decimal(30)),
            NamespaceSpec("team-a-training", share=Decimal(70)),
        ),
    )
    objects = compiler.compile_cluster(ClusterSpec("c", flavors, enforcement="split"), [tenant])
    hard = {
        o["metadata"]["namespace"]: o["spec"]["hard"]
        for o in objects
        if o["kind"] == "ResourceQuota"
    }
    assert hard["team-a-training"]["requests.memory"] == "734003Mi"
    assert hard["team-a-inference"]["requests.memory"] == "314573Mi"  # 1Ti in all
    assert hard["team-a-training"]["requests.storage"] == "734003Mi"
