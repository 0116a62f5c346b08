"""MIG through NVIDIA's GPU Operator: the pure part (plain data in, dicts out; no Django).

Instead of the portal's node agent, a ``gpu-operator`` cluster (``Cluster.mig_driver``) has the
operator's MIG manager repartition its GPUs. What the MIG manager reads (GPU Operator docs "GPU
Operator with MIG", custom MIG configuration; mig-parted ``pkg/mig/reconfigure``;
``../shared/reference/notes-mig.md`` sections 2 and 3.1):

- a mig-parted config file (``version: v1``, ``mig-configs: {name: [entries]}``) mounted from
  the ConfigMap that ClusterPolicy ``spec.migManager.config.name`` names, key ``config.yaml``,
  in the operator's namespace (``gpu-operator``);
- on each node, the label ``nvidia.com/mig.config=<name>``: on every change of it the MIG
  manager applies that config and writes ``nvidia.com/mig.config.state`` (``pending``,
  ``rebooting``, ``success``, ``failed``).

So this module compiles, from each node's desired layouts (one per GPU, by GPU index), one
named config per distinct node layout (GPUs with the same layout share an entry,
``devices: [0, 1]``), the ConfigMap holding them, and the label each node should carry.

**Counts, not placements.** mig-parted creates GPU instances without a placement and tries
profile orders until one fits; a config cannot say where an instance starts. The portal's exact
placements (``start``) therefore cannot be forced through the operator: only the profile counts
travel, and ``check_node`` validates that the counts fit the GPU model (any placement the
validator finds is one mig-parted can find too). mig-parted also rebuilds a whole GPU when its
config changes, busy instances included: the operator path has no incremental apply.

**Names are content hashes** (``portal-<sha256[:10]>``): the MIG manager reacts to a *change*
of the node label, so a changed layout must get a new name, not new content under the old one.

Safety rules the service (``gpu_agent.services.mig_operator``) relies on:

- configs still named by a live node label are kept in the ConfigMap (a node that restarts its
  MIG manager before its label moves still finds its config), and ``all-disabled`` is always
  there: the operator labels new MIG-capable nodes ``nvidia.com/mig.config=all-disabled``, and a
  custom ConfigMap replaces its default one;
- a node's label is set only once the ConfigMap has held its config for a while (the kubelet
  refreshes a mounted ConfigMap only after its sync period; a label naming a config the file
  does not have yet fails in the MIG manager): the ConfigMap's annotation
  ``portal.gpu-quota.io/config-since`` records when each config first went in;
- the label patch sets the state label to ``pending`` with it, so the previous config's
  ``success`` is never read as this one's; it touches no other label and never creates a Node.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpu_spec.mig.catalogue import Catalogue, load_catalogue
from gpu_spec.mig.config import (
    ConfigError,
    MigConfigEntry,
    entry_for_layout,
    parse_mig_parted_config,
    render_mig_parted_config,
)
from gpu_spec.mig.layout import InstanceRequest, validate_layout

LABEL_CONFIG = "nvidia.com/mig.config"
LABEL_STATE = "nvidia.com/mig.config.state"
# Records which config the portal put in LABEL_CONFIG (a label set by hand is left alone).
ANNOTATION_SET_BY_PORTAL = "portal.gpu-quota.io/mig-config"
# On the ConfigMap: {config name: when it first went in (ISO 8601)}, JSON.
ANNOTATION_SINCE = "portal.gpu-quota.io/config-since"
STATE_PENDING = "pending"
STATE_REBOOTING = "rebooting"
STATE_SUCCESS = "success"
STATE_FAILED = "failed"
ALL_DISABLED = "all-disabled"
CONFIG_PREFIX = "portal-"

# Owner labels of the MIG ConfigMap: a managed-by value of its own, so the quota sync (which
# owns and prunes everything labelled managed-by=gpu-quota-portal) never prunes it, and the MIG
# push (which prunes only its own) never touches a quota object.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY_MIG = "gpu-quota-portal-mig"
LABEL_CLUSTER = "portal.gpu-quota.io/cluster"


@dataclass(frozen=True)
class GpuWanted:
    """One GPU's desired layout: its index on the node (what mig-parted's ``devices`` lists),
    its model as NVML names it, MIG on or off, and one profile name per instance."""

    index: int
    model: str
    mig_enabled: bool
    profiles: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeWanted:
    name: str
    gpus: tuple[GpuWanted, ...]


@dataclass(frozen=True)
class LabelPatch:
    """A merge patch of one existing Node's metadata (labels and one annotation only)."""

    node: str
    config: str
    body: dict[str, Any]


@dataclass
class OperatorPlan:
    configs: dict[str, list[MigConfigEntry]]  # in the ConfigMap, in order
    node_configs: dict[str, str]  # node -> the config it should apply
    problems: dict[str, list[str]] = field(default_factory=dict)  # node -> why it gets none
    since: dict[str, str] = field(default_factory=dict)  # config -> first in the ConfigMap

    @property
    def text(self) -> str:
        return render_mig_parted_config(self.configs)

    def ready(self, *, now: datetime, settle: timedelta) -> list[str]:
        """The configs that have been in the ConfigMap for ``settle`` or longer."""
        out = []
        for name, when in self.since.items():
            try:
                since = datetime.fromisoformat(when)
            except ValueError:
                continue
            if since.tzinfo is not None and since <= now - settle:
                out.append(name)
        return out


def check_node(node: NodeWanted, catalogue: Catalogue | None = None) -> list[str]:
    """Why ``node``'s layouts cannot go through the operator ([] when they can): an unknown
    model, or profile counts that do not fit (placements are mig-parted's choice)."""
    catalogue = catalogue or load_catalogue()
    problems = []
    seen: set[int] = set()
    for gpu in node.gpus:
        if gpu.index in seen:
            problems.append(f"GPU index {gpu.index} of node {node.name} is listed twice")
        seen.add(gpu.index)
        if not gpu.mig_enabled:
            continue
        model = catalogue.find_model(gpu.model)
        if model is None:
            problems.append(f"GPU {gpu.index}: {gpu.model} has no MIG profiles in the catalogue")
            continue
        result = validate_layout(model, [InstanceRequest(p) for p in gpu.profiles])
        problems.extend(f"GPU {gpu.index}: {message}" for message in result.errors)
    return problems


def node_entries(node: NodeWanted) -> list[MigConfigEntry]:
    """mig-parted entries for ``node``: GPUs with the same layout share one entry, entries in
    the order of their first GPU index."""
    groups: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for gpu in sorted(node.gpus, key=lambda g: g.index):
        entry = entry_for_layout(
            [InstanceRequest(p) for p in gpu.profiles], mig_enabled=gpu.mig_enabled
        )
        groups.setdefault((gpu.mig_enabled, tuple(entry.mig_devices.items())), []).append(gpu.index)
    return [
        MigConfigEntry(
            devices=tuple(indices),
            mig_enabled=enabled,
            mig_devices=dict(counts),
        )
        for (enabled, counts), indices in groups.items()
    ]


def entry_data(entry: MigConfigEntry) -> dict[str, Any]:
    data: dict[str, Any] = {
        "devices": entry.devices if isinstance(entry.devices, str) else list(entry.devices),
        "mig-enabled": entry.mig_enabled,
    }
    if entry.mig_enabled:
        data["mig-devices"] = dict(entry.mig_devices)
    return data


def config_name(entries: Sequence[MigConfigEntry]) -> str:
    """``portal-<10 hex>`` from the entries' content: same layout, same name; a changed layout
    gets a new name (the MIG manager acts on label changes only)."""
    canonical = json.dumps([entry_data(e) for e in entries], sort_keys=True)
    return CONFIG_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:10]


def parse_live_configs(text: str | None) -> dict[str, list[MigConfigEntry]]:
    """The configs of the ConfigMap as it is in the cluster ({} when absent or unreadable)."""
    if not text:
        return {}
    try:
        parsed = parse_mig_parted_config(text)
    except ConfigError:
        return {}
    return {name: list(entries) for name, entries in parsed.configs.items()}


def parse_since(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """The ConfigMap's ``config-since`` annotation ({} when absent or unreadable)."""
    try:
        data = json.loads((annotations or {}).get(ANNOTATION_SINCE) or "{}")
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def compile_operator(
    nodes: Iterable[NodeWanted],
    *,
    now: datetime,
    live_configs: Mapping[str, Sequence[MigConfigEntry]] | None = None,
    live_since: Mapping[str, str] | None = None,
    live_labels: Mapping[str, Mapping[str, str]] | None = None,
    catalogue: Catalogue | None = None,
) -> OperatorPlan:
    """The configs the ConfigMap should hold and the config each node should apply.

    ``live_configs``: the ConfigMap's configs now, ``live_since`` its ``config-since``
    annotation; ``live_labels``: node name -> labels now. A config a live node label still
    names is kept (see the module docstring); a node whose layouts do not fit gets no config
    and its reasons in ``problems``. A config keeps its ``since`` while its content is the
    same; a new one gets ``now``."""
    live_configs = live_configs or {}
    live_since = live_since or {}
    live_labels = live_labels or {}
    configs: dict[str, list[MigConfigEntry]] = {
        ALL_DISABLED: [MigConfigEntry(devices="all", mig_enabled=False)]
    }
    plan = OperatorPlan(configs=configs, node_configs={})
    for node in sorted(nodes, key=lambda n: n.name):
        if not node.gpus:
            continue
        problems = check_node(node, catalogue)
        if problems:
            plan.problems[node.name] = problems
            continue
        entries = node_entries(node)
        name = config_name(entries)
        configs.setdefault(name, entries)
        plan.node_configs[node.name] = name
    for labels in live_labels.values():
        named = labels.get(LABEL_CONFIG, "")
        if named.startswith(CONFIG_PREFIX) and named not in configs and named in live_configs:
            configs[named] = list(live_configs[named])
    # Stable order: all-disabled first, then by name (a diff shows only what changed).
    plan.configs = {ALL_DISABLED: configs.pop(ALL_DISABLED), **dict(sorted(configs.items()))}
    plan.since = {
        name: (
            live_since[name]
            if name in live_since and list(live_configs.get(name, ())) == list(entries)
            else now.isoformat()
        )
        for name, entries in plan.configs.items()
    }
    return plan


def configmap(
    plan: OperatorPlan, *, cluster: str, namespace: str, name: str, key: str
) -> dict[str, Any]:
    """The ConfigMap the MIG manager reads, with the MIG owner labels."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY_MIG, LABEL_CLUSTER: cluster},
            "annotations": {ANNOTATION_SINCE: json.dumps(plan.since, sort_keys=True)},
        },
        "data": {key: plan.text},
    }


def label_patches(
    plan: OperatorPlan,
    *,
    live_nodes: Mapping[str, Mapping[str, Any]],
    ready_configs: Iterable[str],
) -> tuple[list[LabelPatch], list[str], list[str]]:
    """(patches, deferred nodes, missing nodes) for the nodes whose label must change.

    ``live_nodes``: node name -> its ``metadata`` as read (labels, annotations,
    resourceVersion); ``ready_configs``: the configs in the ConfigMap long enough. A node
    the cluster lacks is reported, never created; a node whose config is not ready yet waits
    for the next pass. A patch carries the node's resourceVersion, so a node changed since it
    was read answers 409 and is patched next pass."""
    ready = set(ready_configs)
    patches: list[LabelPatch] = []
    deferred: list[str] = []
    missing: list[str] = []
    for node, config in sorted(plan.node_configs.items()):
        metadata = live_nodes.get(node)
        if metadata is None:
            missing.append(node)
            continue
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        if labels.get(LABEL_CONFIG) == config:
            if annotations.get(ANNOTATION_SET_BY_PORTAL) != config:
                patches.append(
                    LabelPatch(
                        node,
                        config,
                        {
                            "metadata": {
                                "resourceVersion": metadata.get("resourceVersion"),
                                "annotations": {ANNOTATION_SET_BY_PORTAL: config},
                            }
                        },
                    )
                )
            continue
        if config not in ready:
            deferred.append(node)
            continue
        patches.append(
            LabelPatch(
                node,
                config,
                {
                    "metadata": {
                        "resourceVersion": metadata.get("resourceVersion"),
                        "labels": {LABEL_CONFIG: config, LABEL_STATE: STATE_PENDING},
                        "annotations": {ANNOTATION_SET_BY_PORTAL: config},
                    }
                },
            )
        )
    return patches, deferred, missing


@dataclass(frozen=True)
class NodeVerdict:
    """What a node's labels say about its desired config. ``outcome``: "success", "failed",
    "applying" (the MIG manager is at it) or "waiting" (the label is not set yet)."""

    outcome: str
    message: str


def read_state(*, desired: str, labels: Mapping[str, str], namespace: str) -> NodeVerdict:
    """Interpret ``nvidia.com/mig.config`` and ``nvidia.com/mig.config.state`` of a node that
    should apply config ``desired``."""
    named = labels.get(LABEL_CONFIG, "")
    state = labels.get(LABEL_STATE, "")
    if named != desired:
        return NodeVerdict(
            "waiting",
            f"waiting for the label {LABEL_CONFIG}={desired} (the node says {named or 'nothing'})",
        )
    if state == STATE_SUCCESS:
        return NodeVerdict(STATE_SUCCESS, f"applied by the GPU Operator's MIG manager ({desired})")
    if state == STATE_FAILED:
        return NodeVerdict(
            STATE_FAILED,
            f"the GPU Operator's MIG manager reported {LABEL_STATE}=failed for {desired}; "
            f"its log says why (kubectl -n {namespace} logs -l app=nvidia-mig-manager)",
        )
    if state == STATE_REBOOTING:
        return NodeVerdict("applying", "the node is rebooting to change MIG mode")
    if state == STATE_PENDING:
        return NodeVerdict("applying", "the GPU Operator's MIG manager is applying it")
    return NodeVerdict(
        "applying",
        f"no {LABEL_STATE} yet: is the MIG manager running on this node "
        "(label nvidia.com/gpu.deploy.mig-manager=true)?",
    )
