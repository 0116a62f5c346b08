"""MIG catalogue and rules, importable without Django (standard library and PyYAML only).

- ``catalogue``: GPU models and their GPU-instance profiles (``load_catalogue()``).
- ``layout``: whether instances fit on one GPU and where (``validate_layout``), every maximal
  layout (``enumerate_layouts``), free slices.
- ``config``: NVIDIA mig-parted config files: parse safely, check against a model, write.
"""

from gpu_spec.mig.catalogue import (
    Catalogue,
    CatalogueError,
    GpuModel,
    Profile,
    load_catalogue,
)
from gpu_spec.mig.config import (
    ConfigCheck,
    ConfigError,
    ConfigProblem,
    MigConfigEntry,
    MigPartedConfig,
    entry_for_layout,
    parse_mig_parted_config,
    render_mig_parted_config,
    validate_config,
)
from gpu_spec.mig.layout import (
    RULES,
    InstanceRequest,
    LayoutIssue,
    LayoutResult,
    Placement,
    enumerate_layouts,
    free_slices,
    validate_layout,
)

__all__ = [
    "RULES",
    "Catalogue",
    "CatalogueError",
    "ConfigCheck",
    "ConfigError",
    "ConfigProblem",
    "GpuModel",
    "InstanceRequest",
    "LayoutIssue",
    "LayoutResult",
    "MigConfigEntry",
    "MigPartedConfig",
    "Placement",
    "Profile",
    "entry_for_layout",
    "enumerate_layouts",
    "free_slices",
    "load_catalogue",
    "parse_mig_parted_config",
    "render_mig_parted_config",
    "validate_config",
    "validate_layout",
]
