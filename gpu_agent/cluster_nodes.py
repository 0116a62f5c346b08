"""What a cluster says of its GPU nodes: the pure part (a Kubernetes Node as JSON in, a
``NodeReading`` out; no Django). The service that reads the Nodes and stores the readings is
``gpu_agent.services.cluster_nodes``; fleet capacity (``gpu_agent.selectors.mig_capacity``)
counts a node's GPUs and MIG instances only as far as its reading confirms them.

Where it comes from (NVIDIA k8s-device-plugin and GPU Feature Discovery, "Generated Labels"):

- ``status.allocatable`` (``status.capacity`` when a node has no allocatable): the device
  plugin advertises whole GPUs as ``nvidia.com/gpu`` and, with the ``mixed`` MIG strategy, each
  MIG profile as ``nvidia.com/mig-<profile>`` (``nvidia.com/mig-1g.10gb: 7``); with the
  ``single`` strategy every GPU is split alike and ``nvidia.com/gpu`` counts MIG devices.
- GPU Feature Discovery's labels: ``nvidia.com/gpu.product`` (the model, dashes for spaces:
  ``NVIDIA-H100-80GB-HBM3``; ``-SHARED`` appended when time-sliced, ``-MIG-<profile>`` with the
  ``single`` strategy), ``nvidia.com/gpu.count`` (the GPUs; MIG devices with ``single``),
  ``nvidia.com/mig.strategy`` (``single``, ``mixed``, or absent), ``nvidia.com/gpu.replicas``
  (time-slicing: each GPU advertised that many times), ``nvidia.com/mig-<profile>.count``
  (``mixed``: MIG devices of the profile).

What pods can be given is what the device plugin advertises, so MIG instances are read from
the node's resources; the labels stand in only where a node advertises no ``nvidia.com/``
resource at all. The GPUs confirmed are GPU Feature Discovery's count, else (no label) the
whole GPUs advertised plus one per MIG device advertised (an upper bound: a MIG GPU holds at
least one). With the ``single`` strategy the physical GPUs are not told apart from their MIG
devices: their count bounds the GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"
LABEL_STRATEGY = "nvidia.com/mig.strategy"
STRATEGY_SINGLE = "single"
STRATEGY_MIXED = "mixed"
# GFD's product suffixes: time-sliced ("-SHARED"), the single strategy's MIG profile.
_SHARED_SUFFIX = "-SHARED"
_SINGLE_PRODUCT = re.compile(r"^(?P<model>.+)-MIG-(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
_MIG_COUNT_LABEL = re.compile(r"^nvidia\.com/mig-(?P<profile>[^/]+)\.count$")
_COUNT_MAX = 100_000  # more than any node holds: a bigger number is not believed


@dataclass(frozen=True)
class NodeReading:
    """One Node as the cluster describes it: the GPUs it confirms, the product its label names
    (GPU Feature Discovery's spelling, without the ``-SHARED`` or ``-MIG-...`` suffix; "" when
    unlabelled) and the MIG instances advertised per profile."""

    gpus: int
    product: str = ""
    mig: dict[str, int] = field(default_factory=dict)


def _count(value: Any) -> int:
    """A resource amount or label value as a whole number; 0 for anything else (a node's
    ``nvidia.com/`` resources are plain integers)."""
    text = str(value).strip() if isinstance(value, (str, int)) else ""
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return 0
    return min(int(text), _COUNT_MAX)


def read_node(obj: Mapping[str, Any]) -> NodeReading:
    """The reading of one Node object (as the API returns it)."""
    metadata = obj.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    status = obj.get("status") or {}
    resources: Mapping[str, Any] = status.get("allocatable") or status.get("capacity") or {}
    advertised = any(str(k).startswith("nvidia.com/") for k in resources)
    strategy = str(labels.get(LABEL_STRATEGY, "")).strip()
    product = str(labels.get(LABEL_PRODUCT, "")).strip().removesuffix(_SHARED_SUFFIX)

    single = _SINGLE_PRODUCT.match(product) if strategy == STRATEGY_SINGLE else None
    if single is not None:
        devices = (
            _count(resources.get(GPU_RESOURCE)) if advertised else _count(labels.get(LABEL_COUNT))
        )
        mig = {single["profile"]: devices} if devices else {}
        return NodeReading(gpus=devices, product=single["model"], mig=mig)

    mig = {}
    if advertised:
        for name, value in resources.items():
            name = str(name)
            if name.startswith(MIG_RESOURCE_PREFIX) and _count(value):
                mig[name.removeprefix(MIG_RESOURCE_PREFIX)] = _count(value)
    else:
        for name, value in labels.items():
            match = _MIG_COUNT_LABEL.match(str(name))
            if match and _count(value):
                mig[match["profile"]] = _count(value)
    if LABEL_COUNT in labels:
        gpus = _count(labels[LABEL_COUNT])
    else:
        replicas = max(_count(labels.get(LABEL_REPLICAS)), 1)
        gpus = _count(resources.get(GPU_RESOURCE)) // replicas + sum(mig.values())
    return NodeReading(gpus=gpus, product=product, mig=dict(sorted(mig.items())))


def _model_key(name: str) -> str:
    """A model name as compared with a product label: dashes, underscores and spaces alike,
    case folded, without the "NVIDIA" prefix (``NVIDIA-A100-SXM4-80GB`` is NVML's
    ``NVIDIA A100-SXM4-80GB``)."""
    text = re.sub(r"[\s_-]+", " ", name).strip().casefold()
    return text.removeprefix("nvidia ").strip()


def product_matches(product: str, gpu_name: str) -> bool:
    """Whether a node's product label names the model NVML calls ``gpu_name``; a node without
    the label does not contradict any model."""
    return not product or _model_key(product) == _model_key(gpu_name)
