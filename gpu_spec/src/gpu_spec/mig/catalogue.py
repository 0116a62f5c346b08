"""The MIG profile catalogue: which GPU-instance profiles each GPU model offers, and where.

Read from ``data/mig_profiles.json`` (a copy of the project's reference table; see
``data/README.md``). Pure Python: imports only the standard library, so the node agent and the
planner use it without Django.

Two "profile ids" exist and both are kept (notes-mig.md 1.1): ``nvml_profile_const`` is the
``NVML_GPU_INSTANCE_PROFILE_*`` constant passed to ``nvmlDeviceGetGpuInstanceProfileInfo``;
``nvidia_smi_profile_id`` is ``GpuInstanceProfileInfo.id``, which the create and placement calls
take. Placements count memory slices: a profile of ``memory_slices`` N started at S occupies
slices ``[S, S + N)``.

Every field of the table is marked ``confirmed`` or ``inferred``; ``Profile.confirmed`` is true
only when the name/count, the profile id and the placements are all confirmed, and the raw
markings stay readable in ``Profile.status``. A status that starts with "confirmed" but also
says "inferred", "unverified" or "unknown" (e.g. "confirmed for 1g.24gb..7g; 1g ids inferred")
counts as not confirmed: the flag errs on the side of checking on hardware.

Model names are what ``nvmlDeviceGetName()`` returns. ``find_model`` also accepts the other
names the table lists for a model (``nvml_name_aliases``, e.g. "NVIDIA A100-PCIE-40GB",
"NVIDIA H800"), names without the "NVIDIA " prefix (older drivers omit it, per the table's
A100-40GB entry), and any case or spacing. It does not guess beyond the data: "H100-SXM5-80GB"
is a marketing name, not one NVML reports, and finds nothing.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_PATH = DATA_DIR / "mig_profiles.json"
SUPPORTED_SCHEMA_VERSION = 1

# "1g.10gb", "1g.10gb+me", "1g.24gb+me.all", "1g.24gb+gfx", "1g.24gb-me"
PROFILE_NAME = re.compile(r"(?P<g>[1-9]\d*)g\.(?P<gb>[1-9]\d*)gb(?P<attr>(?:[+-][a-z][a-z.]*)*)")
# An alias is kept when, once a trailing "(...)" remark is cut, it reads like a product name:
# words that start with a capital or a digit ("NVIDIA H100 PCIe"), not a sentence.
_ALIAS_NAME = re.compile(r"(?:NVIDIA )?[A-Z0-9][A-Za-z0-9\-]*(?: [A-Z0-9][A-Za-z0-9\-]*)*")
_TRAILING_REMARK = re.compile(r"\s*\([^()]*\)\s*$")
_PCI_ID = re.compile(r"0x[0-9a-fA-F]{1,8}")
_NVIDIA_VENDOR = 0x10DE
_UNCONFIRMED_WORDS = ("inferred", "unverified", "unknown", "not verified")


class CatalogueError(ValueError):
    """The profile table is malformed or breaks one of its own invariants."""


def _is_confirmed(status: str | None) -> bool:
    if not status:
        return False
    text = status.strip().lower()
    return text.startswith("confirmed") and not any(w in text for w in _UNCONFIRMED_WORDS)


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile on one GPU model (one full compute instance per GPU instance)."""

    name: str
    nvidia_smi_profile_id: int  # GpuInstanceProfileInfo.id: what Create*/placement calls take
    nvml_profile_const: str  # NVML_GPU_INSTANCE_PROFILE_*: what GetGpuInstanceProfileInfo takes
    nvml_profile_const_value: int
    memory_mib: int | None  # memorySizeMB as nvidia-smi -lgip reported it; None: not observed
    memory_gb_nominal: int  # the XX in Ng.XXgb
    memory_fraction: str  # as the MIG guide gives it, e.g. "2/8"
    compute_slices: int
    memory_slices: int  # = placement size
    max_count: int  # instances of this profile alone on an empty GPU
    placements: tuple[int, ...]  # valid start positions, in memory slices
    sm_count: int | None
    media_extensions: bool  # "+me": NVDEC/NVENC/JPEG/OFA; at most one such instance per GPU
    name_confirmed: bool  # name, memory fraction and max count
    profile_id_confirmed: bool
    placements_confirmed: bool
    status: Mapping[str, str] = field(hash=False, repr=False)
    sources: tuple[str, ...] = ()
    notes: str = ""

    @property
    def confirmed(self) -> bool:
        """Name/count, profile id and placements all read from a source for this exact GPU."""
        return self.name_confirmed and self.profile_id_confirmed and self.placements_confirmed

    @property
    def size(self) -> int:
        return self.memory_slices

    def slices(self, start: int) -> range:
        """The memory slices an instance started at ``start`` occupies."""
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model, named as ``nvmlDeviceGetName()`` names it."""

    name: str
    compute_slices: int  # 7 on A100/H100/H200/B200, 4 on A30
    memory_slices: int  # 8 on 7-compute-slice GPUs, 4 on A30
    profiles: Mapping[str, Profile] = field(hash=False, repr=False)
    pci_device_ids: tuple[str, ...] = ()  # "0x233010DE": device << 16 | vendor, as mig-parted
    aliases: tuple[str, ...] = ()  # other NVML names with the same table
    total_sms: int | None = None
    derived_from: str | None = None  # the entry whose table this one shares ("same_as")
    notes: str = ""

    @property
    def confirmed(self) -> bool:
        return all(p.confirmed for p in self.profiles.values())

    def find_profile(self, name: str) -> Profile | None:
        return self.profiles.get(name.strip())

    def profile_names(self) -> list[str]:
        return list(self.profiles)

    def full_profile(self) -> Profile | None:
        """The profile that takes the whole GPU (7g.80gb on an A100-80GB)."""
        for profile in self.profiles.values():
            if profile.memory_slices == self.memory_slices and not profile.media_extensions:
                return profile
        return None


def normalise_model_name(name: str) -> str:
    """The form model names are compared in: spacing collapsed, case folded, no "NVIDIA "."""
    text = " ".join(name.split()).casefold()
    return text.removeprefix("nvidia ").strip()


def parse_pci_device_id(value: str | int) -> int | None:
    """``"0x233010DE"`` or ``0x233010DE`` -> the packed device/vendor id; a bare device id
    (``"0x2330"``, at most 16 bits) is taken as NVIDIA's. None when it is not an id."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    else:
        text = value.strip().split(":", 1)[0]  # a ":subsystem" qualifier is not compared
        if not _PCI_ID.fullmatch(text):
            return None
        number = int(text, 16)
    if number < 0 or number > 0xFFFFFFFF:
        return None
    if number <= 0xFFFF:
        number = number << 16 | _NVIDIA_VENDOR
    return number


def format_pci_device_id(number: int) -> str:
    return f"0x{number:08X}"


class Catalogue:
    """GPU models and their profiles, looked up by NVML name, alias or PCI device id."""

    def __init__(
        self, models: Iterable[GpuModel], *, schema_version: int = 1, source: str = ""
    ) -> None:
        self._models: dict[str, GpuModel] = {}
        for model in models:
            if model.name in self._models:
                raise CatalogueError(f"GPU model {model.name!r} is listed twice")
            self._models[model.name] = model
        self.schema_version = schema_version
        self.source = source
        self._by_name: dict[str, GpuModel] = {}
        # Every entry's own name first, so an entry wins over another entry's alias for it
        # ("NVIDIA H100 PCIe" is an entry and an alias of "NVIDIA H100 80GB HBM3").
        for model in self._models.values():
            self._by_name[normalise_model_name(model.name)] = model
        for model in self._models.values():
            for alias in model.aliases:
                self._by_name.setdefault(normalise_model_name(alias), model)
        # A PCI id listed by several entries goes to the one that lists the fewest: the most
        # specific ("0x233110DE" is in the H100 80GB HBM3 list and is the whole H100 PCIe one).
        self._by_pci: dict[int, GpuModel] = {}
        for model in sorted(self._models.values(), key=lambda m: len(m.pci_device_ids)):
            for pci in model.pci_device_ids:
                number = parse_pci_device_id(pci)
                if number is not None:
                    self._by_pci.setdefault(number, model)

    def models(self) -> list[GpuModel]:
        """Every model, in the table's order."""
        return list(self._models.values())

    def model_names(self) -> list[str]:
        return list(self._models)

    def model(self, name: str) -> GpuModel:
        """The model with this NVML name or alias; ``KeyError`` naming the known ones if none."""
        found = self.find_model(name)
        if found is None:
            raise KeyError(
                f"{name!r} is not a GPU model in the MIG catalogue; known models: "
                + ", ".join(self._models)
            )
        return found

    def find_model(self, name: str) -> GpuModel | None:
        """The model with this NVML name or alias (any case or spacing, with or without the
        "NVIDIA " prefix), or None."""
        if not isinstance(name, str):
            return None
        return self._by_name.get(normalise_model_name(_TRAILING_REMARK.sub("", name)))

    def find_model_by_pci_device_id(self, pci_device_id: str | int) -> GpuModel | None:
        """The model for a PCI id as NVML (``pciDeviceId``) or mig-parted's ``device-filter``
        write it: ``0x233010DE`` (device << 16 | vendor). A subsystem suffix is ignored."""
        number = parse_pci_device_id(pci_device_id)
        return None if number is None else self._by_pci.get(number)

    def models_with_profile(self, profile_name: str) -> list[GpuModel]:
        return [m for m in self._models.values() if profile_name in m.profiles]

    def __iter__(self) -> Iterator[GpuModel]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find_model(name) is not None


# ---------------------------------------------------------------------------------------------
# Loading


def _require(
    mapping: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str
) -> Any:
    if key not in mapping:
        raise CatalogueError(f"{where}: missing {key!r}")
    value = mapping[key]
    if isinstance(value, bool) and kind is not bool and bool not in _as_tuple(kind):
        raise CatalogueError(f"{where}.{key}: expected {kind}, got a boolean")
    if not isinstance(value, kind):
        raise CatalogueError(f"{where}.{key}: expected {kind}, got {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _optional_int(mapping: Mapping[str, Any], key: str, where: str) -> int | None:
    value = mapping.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CatalogueError(f"{where}.{key}: expected an integer or null")
    return value


def _clean_aliases(raw: Iterable[Any], own_name: str) -> tuple[str, ...]:
    aliases: list[str] = []
    for entry in raw:
        if not isinstance(entry, str):
            continue
        name = _TRAILING_REMARK.sub("", entry).strip()
        if not _ALIAS_NAME.fullmatch(name):
            continue  # prose ("H100 96GB on GH200 (MIG guide)"), not a name NVML reports
        if normalise_model_name(name) == normalise_model_name(own_name):
            continue
        if name not in aliases:
            aliases.append(name)
    return tuple(aliases)


def _parse_profile(
    raw: Mapping[str, Any],
    *,
    where: str,
    constants: Mapping[str, int],
    compute_total: int,
    memory_total: int,
) -> Profile:
    name = _require(raw, "name", str, where)
    where = f"{where}[{name}]"
    match = PROFILE_NAME.fullmatch(name)
    if match is None:
        raise CatalogueError(f"{where}: {name!r} is not a profile name like 3g.40gb")
    const = _require(raw, "nvml_profile_const", str, where)
    const_value = _require(raw, "nvml_profile_const_value", int, where)
    if const in constants and constants[const] != const_value:
        raise CatalogueError(
            f"{where}: {const} is {constants[const]} in nvml.h, the entry says {const_value}"
        )
    compute = _require(raw, "compute_slices", int, where)
    memory = _require(raw, "memory_slices", int, where)
    max_count = _require(raw, "max_count", int, where)
    nominal = _require(raw, "memory_gb_nominal", int, where)
    if int(match["g"]) != compute or int(match["gb"]) != nominal:
        raise CatalogueError(
            f"{where}: the name says {match['g']}g/{match['gb']}gb, the fields say "
            f"{compute} compute slices/{nominal} GB"
        )
    if not 1 <= compute <= compute_total:
        raise CatalogueError(f"{where}: {compute} compute slices on a {compute_total}-slice GPU")
    if not 1 <= memory <= memory_total:
        raise CatalogueError(f"{where}: {memory} memory slices on a {memory_total}-slice GPU")
    if max_count < 1:
        raise CatalogueError(f"{where}: max_count {max_count}")
    starts: list[int] = []
    for index, placement in enumerate(_require(raw, "placements", list, where)):
        pwhere = f"{where}.placements[{index}]"
        if not isinstance(placement, Mapping):
            raise CatalogueError(f"{pwhere}: expected {{start, size}}")
        start = _require(placement, "start", int, pwhere)
        size = _require(placement, "size", int, pwhere)
        if size != memory:
            raise CatalogueError(f"{pwhere}: size {size}, but the profile takes {memory} slices")
        if start < 0 or start + size > memory_total:
            raise CatalogueError(f"{pwhere}: slices {start}..{start + size - 1} are off the GPU")
        if start in starts:
            raise CatalogueError(f"{pwhere}: start {start} is listed twice")
        starts.append(start)
    if not starts:
        raise CatalogueError(f"{where}: no placements")
    status = raw.get("status") or {}
    if not isinstance(status, Mapping):
        raise CatalogueError(f"{where}.status: expected an object")
    status_text = {str(k): str(v) for k, v in status.items()}
    sources = raw.get("sources") or []
    return Profile(
        name=name,
        nvidia_smi_profile_id=_require(raw, "nvidia_smi_profile_id", int, where),
        nvml_profile_const=const,
        nvml_profile_const_value=const_value,
        memory_mib=_optional_int(raw, "memory_mib_reported", where),
        memory_gb_nominal=nominal,
        memory_fraction=str(raw.get("memory_fraction") or ""),
        compute_slices=compute,
        memory_slices=memory,
        max_count=max_count,
        placements=tuple(sorted(starts)),
        sm_count=_optional_int(raw, "sm_count", where),
        media_extensions=bool(raw.get("media_extensions", "+me" in name)),
        name_confirmed=_is_confirmed(status_text.get("name_fraction_maxcount")),
        profile_id_confirmed=_is_confirmed(status_text.get("nvidia_smi_profile_id")),
        placements_confirmed=_is_confirmed(status_text.get("placements")),
        status=MappingProxyType(status_text),
        sources=tuple(str(s) for s in sources),
        notes=str(raw.get("notes") or ""),
    )


def _parse_model(
    name: str, raw: Mapping[str, Any], constants: Mapping[str, int]
) -> tuple[GpuModel, str | None]:
    where = f"gpus[{name}]"
    if not isinstance(raw, Mapping):
        raise CatalogueError(f"{where}: expected an object")
    pci = tuple(str(p).upper().replace("0X", "0x") for p in raw.get("pci_device_ids") or [])
    for p in pci:
        if parse_pci_device_id(p) is None:
            raise CatalogueError(f"{where}.pci_device_ids: {p!r} is not a PCI id like 0x233010DE")
    aliases = _clean_aliases(raw.get("nvml_name_aliases") or [], name)
    notes = str(raw.get("notes") or "")
    same_as = raw.get("same_as")
    if same_as is not None:
        if not isinstance(same_as, str):
            raise CatalogueError(f"{where}.same_as: expected a model name")
        # Filled in by _derive() once the entry it names is parsed.
        placeholder = GpuModel(
            name=name,
            compute_slices=0,
            memory_slices=0,
            profiles=MappingProxyType({}),
            pci_device_ids=pci,
            aliases=aliases,
            derived_from=same_as,
            notes=notes,
        )
        return placeholder, same_as
    compute_total = _require(raw, "total_compute_slices", int, where)
    memory_total = _require(raw, "total_memory_slices", int, where)
    if compute_total < 1 or memory_total < 1:
        raise CatalogueError(f"{where}: slice totals must be positive")
    profiles: dict[str, Profile] = {}
    ids: dict[int, str] = {}
    for raw_profile in _require(raw, "profiles", list, where):
        if not isinstance(raw_profile, Mapping):
            raise CatalogueError(f"{where}.profiles: expected objects")
        profile = _parse_profile(
            raw_profile,
            where=f"{where}.profiles",
            constants=constants,
            compute_total=compute_total,
            memory_total=memory_total,
        )
        if profile.name in profiles:
            raise CatalogueError(f"{where}: profile {profile.name} is listed twice")
        if profile.nvidia_smi_profile_id in ids:
            raise CatalogueError(
                f"{where}: profile id {profile.nvidia_smi_profile_id} is both "
                f"{ids[profile.nvidia_smi_profile_id]} and {profile.name}"
            )
        ids[profile.nvidia_smi_profile_id] = profile.name
        profiles[profile.name] = profile
    model = GpuModel(
        name=name,
        compute_slices=compute_total,
        memory_slices=memory_total,
        profiles=MappingProxyType(profiles),
        pci_device_ids=pci,
        aliases=aliases,
        total_sms=_optional_int(raw, "total_sms_mig_mode", where),
        notes=notes,
    )
    return model, None


def _derive(model: GpuModel, base: GpuModel) -> GpuModel:
    """An entry that shares another's table ("same_as"). Its profiles are the base's, but
    nobody has read this SKU's placements or SM counts: placements are marked inferred and the
    SM counts dropped (H100 PCIe has 114 SMs, not the SXM's 132)."""
    reason = f"inferred (same table as {base.name}; not read on this SKU)"
    profiles = {}
    for profile in base.profiles.values():
        status = dict(profile.status)
        status["placements"] = reason
        status["sm_count"] = "unknown for this SKU"
        profiles[profile.name] = replace(
            profile,
            sm_count=None,
            placements_confirmed=False,
            status=MappingProxyType(status),
        )
    return GpuModel(
        name=model.name,
        compute_slices=base.compute_slices,
        memory_slices=base.memory_slices,
        profiles=MappingProxyType(profiles),
        pci_device_ids=model.pci_device_ids,
        aliases=model.aliases,
        total_sms=None,
        derived_from=base.name,
        notes=model.notes,
    )


def parse_catalogue(data: Mapping[str, Any], *, source: str = "") -> Catalogue:
    """Build a catalogue from the table's JSON object, checking its invariants."""
    if not isinstance(data, Mapping):
        raise CatalogueError("the MIG profile table must be a JSON object")
    version = data.get("schema_version")
    if version != SUPPORTED_SCHEMA_VERSION:
        raise CatalogueError(
            f"schema_version {version!r}; this code reads {SUPPORTED_SCHEMA_VERSION}"
        )
    constants = {
        k: v
        for k, v in (data.get("nvml_gpu_instance_profile_constants") or {}).items()
        if isinstance(v, int) and not isinstance(v, bool)
    }
    gpus = data.get("gpus")
    if not isinstance(gpus, Mapping) or not gpus:
        raise CatalogueError("'gpus' must be a non-empty object")
    parsed: dict[str, GpuModel] = {}
    derived: dict[str, str] = {}
    for name, raw in gpus.items():
        model, same_as = _parse_model(str(name), raw, constants)
        parsed[model.name] = model
        if same_as is not None:
            derived[model.name] = same_as
    for name, base_name in derived.items():
        base = parsed.get(base_name)
        if base is None or base.name in derived:
            raise CatalogueError(f"gpus[{name}].same_as: {base_name!r} is not a full entry")
        parsed[name] = _derive(parsed[name], base)
    # An alias that is another entry's own name belongs to that entry ("NVIDIA H100 PCIe" is
    # listed under "NVIDIA H100 80GB HBM3" and has an entry of its own).
    entry_names = {normalise_model_name(n) for n in parsed}
    for name, model in parsed.items():
        aliases = tuple(a for a in model.aliases if normalise_model_name(a) not in entry_names)
        if aliases != model.aliases:
            parsed[name] = replace(model, aliases=aliases)
    return Catalogue(parsed.values(), schema_version=version, source=source)


def read_catalogue(path: Path | str) -> Catalogue:
    """Parse a table file (no caching; ``load_catalogue`` caches the shipped one)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogueError(f"cannot read {path}: {exc}") from exc
    return parse_catalogue(data, source=str(path))


@functools.cache
def load_catalogue() -> Catalogue:
    """The catalogue shipped in ``data/mig_profiles.json``, parsed once per process."""
    return read_catalogue(DEFAULT_PATH)
