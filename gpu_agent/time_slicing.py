"""Time-sliced GPUs through the NVIDIA device plugin: which node reads which config (pure: plain
data in, patches out; no Django).

The quota sync pushes the device plugin's sharing config as one ConfigMap (``gpu-portal-time-
slicing`` in ``gpu-operator``, one key per time-sliced flavor: ``version: v1``, ``sharing:
timeSlicing: resources: [{name: nvidia.com/gpu, replicas: N}]``; ``quotas.kube.compiler``).
The device plugin reads it when the GPU Operator's ClusterPolicy names it
(``spec.devicePlugin.config.name``), or the device plugin's Helm chart does (``config.name``);
each node picks its key with the label ``nvidia.com/device-plugin.config=<key>``. The plugin's
config-manager sidecar watches that label and restarts the plugin when it changes, so the node
then advertises each GPU N times.

What the sidecar does not see is a change of a key's *content* under the same label (a flavor
going from 4 to 10 replicas): NVIDIA's documentation says to restart the device plugin's pods
then. The portal does what it does after a MIG change (``gpu_node_agent.device_plugin``):
it deletes the plugin's pods on the node, and its DaemonSet starts new ones that read the new
config. Each node records which content it was given (``ANNOTATION_CONFIG``:
``<key>@<sha256[:10]>``), so a pass with nothing new writes nothing and restarts nothing.

Which nodes: those carrying every node label of the flavor (what Kueue's ResourceFlavor
selects). Once a GPU is shared, GPU Feature Discovery appends ``-SHARED`` to the node's
``nvidia.com/gpu.product``; a flavor may name either form, and a node matches with or without
it. A node matching two time-sliced flavors is reported and left alone. A node the portal once
labelled that no time-sliced flavor selects any more gets the label removed (the plugin goes
back to its default config, whole GPUs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LABEL_CONFIG = "nvidia.com/device-plugin.config"
LABEL_PRODUCT = "nvidia.com/gpu.product"
SHARED_SUFFIX = "-SHARED"
# On a Node: which config key and content the portal gave it, "<key>@<hash>".
ANNOTATION_CONFIG = "portal.gpu-quota.io/device-plugin-config"


@dataclass(frozen=True)
class SharedFlavor:
    """A time-sliced flavor: its name (the ConfigMap key) and the node labels it selects."""

    name: str
    node_labels: Mapping[str, str]


@dataclass(frozen=True)
class NodePatch:
    """A merge patch of one existing Node's metadata; ``restart``: the device plugin's pods on
    it must be restarted (same label, new content)."""

    node: str
    config: str  # the key the node reads, "" when its label is removed
    body: dict[str, Any]
    restart: bool = False


@dataclass
class TimeSlicingPlan:
    patches: list[NodePatch] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)  # node -> why it is not labelled yet
    conflicts: dict[str, list[str]] = field(default_factory=dict)  # node -> flavors it matches


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _same(wanted: str, have: str | None, key: str) -> bool:
    if have is None:
        return False
    if key == LABEL_PRODUCT:
        return wanted.removesuffix(SHARED_SUFFIX) == have.removesuffix(SHARED_SUFFIX)
    return wanted == have


def selects(flavor: SharedFlavor, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` is one of ``flavor``'s (an empty selector selects none:
    time-slicing every GPU of a cluster by accident is not what an admin means)."""
    if not flavor.node_labels:
        return False
    return all(_same(v, labels.get(k), k) for k, v in flavor.node_labels.items())


def plan(
    flavors: Sequence[SharedFlavor],
    *,
    live_nodes: Mapping[str, Mapping[str, Any]],
    configmap_data: Mapping[str, str],
) -> TimeSlicingPlan:
    """The patches that bring each node's label (and annotation) to its flavor's config.

    ``live_nodes``: node name -> its ``metadata`` as read; ``configmap_data``: the live
    ConfigMap's data (a node is labelled only once its key is there: a label naming a key the
    plugin cannot find fails its restart). Each patch carries the node's resourceVersion, so a
    node changed since it was read answers 409 and waits for the next pass."""
    out = TimeSlicingPlan()
    for node, metadata in sorted(live_nodes.items()):
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        matching = [f.name for f in flavors if selects(f, labels)]
        version = metadata.get("resourceVersion")
        given = annotations.get(ANNOTATION_CONFIG)
        if len(matching) > 1:
            out.conflicts[node] = sorted(matching)
            continue
        if not matching:
            if given and labels.get(LABEL_CONFIG) == given.partition("@")[0]:
                out.patches.append(
                    NodePatch(
                        node,
                        "",
                        {
                            "metadata": {
                                "resourceVersion": version,
                                "labels": {LABEL_CONFIG: None},
                                "annotations": {ANNOTATION_CONFIG: None},
                            }
                        },
                    )
                )
            continue
        key = matching[0]
        text = configmap_data.get(key)
        if text is None:
            out.waiting[node] = f"the device plugin's ConfigMap has no key {key} yet"
            continue
        wanted = f"{key}@{content_hash(text)}"
        if labels.get(LABEL_CONFIG) != key:
            body = {
                "metadata": {
                    "resourceVersion": version,
                    "labels": {LABEL_CONFIG: key},
                    "annotations": {ANNOTATION_CONFIG: wanted},
                }
            }
            out.patches.append(NodePatch(node, key, body))
        elif given != wanted:
            # Same label, new content (or a label set by hand, content unknown): the sidecar
            # sees no change, so the plugin must be restarted to read it.
            body = {
                "metadata": {"resourceVersion": version, "annotations": {ANNOTATION_CONFIG: wanted}}
            }
            out.patches.append(NodePatch(node, key, body, restart=True))
    return out
