"""What the fleet pages share: admin-only access, wording ("5 min ago", "3g.40gb@0"), the
MIG catalogue and NVIDIA's example mig-parted configs."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from gpu_agent import selectors as fleet_selectors
from gpu_agent.models import Gpu
from gpu_spec.mig.catalogue import DATA_DIR, GpuModel, Profile, load_catalogue
from gpu_spec.mig.config import MigConfigEntry, MigPartedConfig, read_mig_parted_config
from gpu_spec.mig.config import configs_valid_for as mig_configs_valid_for
from gpu_spec.mig.layout import Placement, describe_starts
from tenants.api.base import caller
from tenants.models import User

EXAMPLE_CONFIG = DATA_DIR / "mig-parted-config-example.yaml"


# --- access ---------------------------------------------------------------------------------


def admin_user(request: HttpRequest) -> User:
    """The caller, when a platform admin; 403 for everyone else (the views are behind
    ``login_required``, so anonymous visitors were sent to the login page already)."""
    user = caller(request)
    if not user.is_platform_admin:
        raise PermissionDenied("The GPU fleet is for platform admins only.")
    return user


def gpu_for(user: User, uuid: str) -> Gpu:
    """The GPU (a NotFound becomes the 404 page)."""
    return fleet_selectors.gpu_get(user=user, uuid=uuid)


# --- wording --------------------------------------------------------------------------------


def ago(moment: datetime | None, now: datetime) -> str:
    """ "12 s ago", "5 min ago", "3 h ago", "2 d ago"; "never" for None."""
    if moment is None:
        return "never"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min ago"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def gib(mib: int) -> str:
    return f"{mib / 1024:.1f}"


def describe(instances: Iterable[Mapping[str, Any] | Placement]) -> str:
    """ "3g.40gb@0, 1g.10gb@4" (a start the agent picks: "1g.10gb@auto")."""
    parts = []
    for item in instances:
        if isinstance(item, Placement):
            parts.append(f"{item.profile}@{item.start}")
        else:
            start = item.get("start")
            parts.append(f"{item['profile']}@{'auto' if start is None else start}")
    return ", ".join(parts) or "no instances"


# --- the catalogue and NVIDIA's example configs ---------------------------------------------


def model_of(gpu: Gpu) -> GpuModel | None:
    """The GPU's model in the MIG catalogue (by its NVML name), None when it has none."""
    return load_catalogue().find_model(gpu.name)


@functools.cache
def example_configs() -> MigPartedConfig:
    """NVIDIA's default mig-parted file (``gpu_spec/src/gpu_spec/mig/data``), parsed once per process."""
    return read_mig_parted_config(EXAMPLE_CONFIG)


@functools.cache
def configs_for(model: GpuModel) -> tuple[str, ...]:
    """The example file's configs that give ``model`` a valid layout, in the file's order."""
    return tuple(mig_configs_valid_for(example_configs(), model))


def config_entry(name: str, model: GpuModel, index: int) -> MigConfigEntry | None:
    """The entry of example config ``name`` that mig-parted would apply to GPU ``index`` of
    ``model``: the first whose device filter reaches the model and whose devices include it."""
    entries = example_configs().configs.get(name, ())
    for entry in entries:
        if entry.applies_to(model) and (entry.devices == "all" or index in entry.devices):
            return entry
    return None


def profile_label(profile: Profile) -> str:
    slices = "slice" if profile.memory_slices == 1 else "slices"
    return (
        f"{profile.name} · {profile.memory_slices} memory {slices}, starts at "
        f"{describe_starts(profile.placements).removeprefix('slice ')}"
    )
