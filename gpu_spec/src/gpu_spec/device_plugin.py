"""The NVIDIA device plugin as the GPU Operator deploys it: where the node agent (after a MIG
change) and the portal (after a time-slicing change) find its pods to restart them."""

DEFAULT_NAMESPACE = "gpu-operator"
DEFAULT_SELECTOR = "app=nvidia-device-plugin-daemonset"
