"""The GPU Operator compiler (``gpu_agent.operator``): pure, plain data in, dicts out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from gpu_agent import operator
from gpu_agent.operator import GpuWanted, NodeWanted, OperatorPlan
from gpu_spec.mig.config import parse_mig_parted_config

NOW = datetime(2026, 12, 3, 10, tzinfo=UTC)


def compile_operator(nodes: list[NodeWanted], **kwargs: Any) -> OperatorPlan:
    return operator.compile_operator(nodes, now=kwargs.pop("now", NOW), **kwargs)


A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def balanced(index: int, model: str = A100) -> GpuWanted:
    return GpuWanted(index, model, True, ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"))


def sevens(index: int, model: str = A100) -> GpuWanted:
    return GpuWanted(index, model, True, ("1g.10gb",) * 7)


def test_one_config_per_distinct_node_layout_in_mig_parted_format() -> None:
    nodes = [
        NodeWanted("gpu-a", (balanced(0), balanced(1), sevens(2))),
        NodeWanted("gpu-b", (sevens(2), balanced(1), balanced(0))),  # same layout, other order
        NodeWanted("gpu-c", (GpuWanted(0, A100, False),)),
    ]
    plan = compile_operator(nodes)

    assert plan.node_configs["gpu-a"] == plan.node_configs["gpu-b"]
    assert plan.node_configs["gpu-c"] != plan.node_configs["gpu-a"]
    assert all(name.startswith("portal-") for name in plan.node_configs.values())
    cm = operator.configmap(
        plan, cluster="demo-h100", namespace="gpu-operator", name="portal-mig", key="config.yaml"
    )
    assert set(operator.parse_since(cm["metadata"].pop("annotations"))) == set(plan.configs)
    assert cm["metadata"] == {
        "name": "portal-mig",
        "namespace": "gpu-operator",
        "labels": {
            "app.kubernetes.io/managed-by": "gpu-quota-portal-mig",
            "portal.gpu-quota.io/cluster": "demo-h100",
        },
    }
    data = yaml.safe_load(cm["data"]["config.yaml"])
    assert data["version"] == "v1"
    assert next(iter(data["mig-configs"])) == "all-disabled"
    assert data["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert data["mig-configs"][plan.node_configs["gpu-a"]] == [
        {
            "devices": [0, 1],
            "mig-enabled": True,
            "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        },
        {"devices": [2], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
    ]
    assert data["mig-configs"][plan.node_configs["gpu-c"]] == [
        {"devices": [0], "mig-enabled": False}
    ]
    # What mig-parted reads, we read back (and it passes the project's strict parser).
    assert set(parse_mig_parted_config(cm["data"]["config.yaml"]).configs) == {
        "all-disabled",
        *plan.node_configs.values(),
    }


def test_a_changed_layout_gets_a_new_name_and_counts_must_fit() -> None:
    before = compile_operator([NodeWanted("n", (balanced(0),))]).node_configs["n"]
    after = compile_operator([NodeWanted("n", (sevens(0),))]).node_configs["n"]
    assert before != after  # the MIG manager acts on label changes only

    # Placements are mig-parted's choice, so only counts are checked: three 4g.40gb do not
    # fit an A100 however they are placed; the node gets no config and says why.
    plan = compile_operator(
        [
            NodeWanted("bad", (GpuWanted(0, A100, True, ("4g.40gb",) * 3),)),
            NodeWanted("odd", (GpuWanted(0, "NVIDIA GeForce RTX 4090", True, ("1g.10gb",)),)),
            NodeWanted("ok", (sevens(0, H100),)),
        ]
    )
    assert set(plan.node_configs) == {"ok"}
    assert "4g.40gb" in " ".join(plan.problems["bad"])
    assert plan.problems["odd"] == [
        "GPU 0: NVIDIA GeForce RTX 4090 has no MIG profiles in the catalogue"
    ]


def test_configs_still_named_by_a_node_are_kept() -> None:
    old = compile_operator([NodeWanted("n1", (balanced(0),))])
    old_name = old.node_configs["n1"]
    live = operator.parse_live_configs(old.text)

    new = compile_operator(
        [NodeWanted("n1", (sevens(0),))],
        live_configs=live,
        live_labels={"n1": {"nvidia.com/mig.config": old_name}, "n2": {"x": "y"}},
    )
    assert old_name in new.configs  # the node still names it until its label moves
    again = compile_operator(
        [NodeWanted("n1", (sevens(0),))],
        live_configs=operator.parse_live_configs(new.text),
        live_labels={"n1": {"nvidia.com/mig.config": new.node_configs["n1"]}},
    )
    assert set(again.configs) == {"all-disabled", new.node_configs["n1"]}
    assert operator.parse_live_configs("not: [valid") == {}


def test_labels_only_on_existing_nodes_once_their_config_is_in_place() -> None:
    plan = compile_operator(
        [NodeWanted(n, (balanced(0),)) for n in ("here", "later", "gone", "done")]
    )
    name = plan.node_configs["here"]
    live = {
        "here": {"resourceVersion": "7", "labels": {"nvidia.com/mig.config": "all-disabled"}},
        "later": {"resourceVersion": "8", "labels": {}},
        "done": {
            "resourceVersion": "9",
            "labels": {"nvidia.com/mig.config": name},
            "annotations": {operator.ANNOTATION_SET_BY_PORTAL: name},
        },
    }
    patches, deferred, missing = operator.label_patches(
        plan, live_nodes=live, ready_configs=["all-disabled", name]
    )
    assert missing == ["gone"]
    assert deferred == []
    assert [(p.node, p.body) for p in patches] == [
        (
            "here",
            {
                "metadata": {
                    "resourceVersion": "7",
                    "labels": {
                        "nvidia.com/mig.config": name,
                        "nvidia.com/mig.config.state": "pending",
                    },
                    "annotations": {operator.ANNOTATION_SET_BY_PORTAL: name},
                }
            },
        ),
        (
            "later",
            {
                "metadata": {
                    "resourceVersion": "8",
                    "labels": {
                        "nvidia.com/mig.config": name,
                        "nvidia.com/mig.config.state": "pending",
                    },
                    "annotations": {operator.ANNOTATION_SET_BY_PORTAL: name},
                }
            },
        ),
    ]
    # The first pass writes the ConfigMap: labels wait until the config is in the file.
    _, deferred, _ = operator.label_patches(plan, live_nodes=live, ready_configs=["all-disabled"])
    assert deferred == ["here", "later"]


def test_reading_the_state_label() -> None:
    def verdict(config: str = "", state: str = "") -> tuple[str, str]:
        labels = {"nvidia.com/mig.config": config, "nvidia.com/mig.config.state": state}
        v = operator.read_state(
            desired="portal-1",
            labels={k: v for k, v in labels.items() if v},
            namespace="gpu-operator",
        )
        return v.outcome, v.message

    assert verdict()[0] == "waiting"
    assert verdict("portal-0", "success")[0] == "waiting"  # the previous config's success
    assert verdict("portal-1", "success")[0] == "success"
    outcome, message = verdict("portal-1", "failed")
    assert outcome == "failed"
    assert "kubectl -n gpu-operator logs -l app=nvidia-mig-manager" in message
    assert verdict("portal-1", "rebooting") == (
        "applying",
        "the node is rebooting to change MIG mode",
    )
    assert verdict("portal-1", "pending")[0] == "applying"


def test_a_config_is_ready_once_it_has_settled_in_the_configmap() -> None:
    nodes = [NodeWanted("n", (balanced(0),))]
    first = compile_operator(nodes)
    name = first.node_configs["n"]
    cm = operator.configmap(first, cluster="c", namespace="gpu-operator", name="m", key="k")
    since = operator.parse_since(cm["metadata"]["annotations"])
    assert since == {"all-disabled": NOW.isoformat(), name: NOW.isoformat()}
    assert first.ready(now=NOW, settle=timedelta(seconds=90)) == []

    later = NOW + timedelta(seconds=91)
    again = compile_operator(
        nodes, now=later, live_configs=operator.parse_live_configs(first.text), live_since=since
    )
    assert again.since == since  # unchanged configs keep their time: the ConfigMap is unchanged
    assert again.ready(now=later, settle=timedelta(seconds=90)) == ["all-disabled", name]
    assert operator.parse_since({operator.ANNOTATION_SINCE: "[1]"}) == {}
