"""NVIDIA mig-parted config files: parse them safely, check them against a GPU model, write ours.

The format (NVIDIA/mig-parted ``api/spec/v1/spec.go``; notes-mig.md 2)::

    version: v1
    mig-configs:
      all-balanced:
        - device-filter: ["0x20B210DE"]   # optional: PCI ids, device << 16 | vendor
          devices: all                    # "all" or a list of GPU indices
          mig-enabled: true
          mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}

Parsing refuses what mig-parted refuses (a missing ``version``, a bare ``devices: 7``, MIG
devices on an entry with ``mig-enabled: false``, unknown fields) and, because the text comes from
users, what a YAML parser should not be made to do: files over ``MAX_CONFIG_BYTES``, nesting
deeper than ``MAX_DEPTH``, more than ``MAX_NODES`` nodes once aliases are expanded (the "billion
laughs"), tags other than YAML's plain ones, and duplicate keys (YAML would keep the last one
silently). Every problem is reported with its path, e.g. ``mig-configs["all-balanced"][0].devices``.

mig-parted creates GPU instances without placements and tries every order; a config is valid for
a model here when ``validate_layout`` finds placements for each entry that applies to it, which
is the same question. Writing a layout back (``render_mig_parted_config``) keeps the counts and
loses the starts: mig-parted has no way to say them.

Pure Python plus PyYAML, like the rest of ``gpu_spec.mig``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

try:
    from yaml._yaml import CParser as _LibyamlParser  # events only: the composer is ours
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    _LibyamlParser = None  # type: ignore[assignment,misc]  # the pure-Python parser instead

from gpu_spec.mig.catalogue import (
    PROFILE_NAME,
    GpuModel,
    format_pci_device_id,
    parse_pci_device_id,
)
from gpu_spec.mig.layout import (
    InstanceRequest,
    LayoutIssue,
    LayoutResult,
    Placement,
    validate_layout,
)

SPEC_VERSION = "v1"
MAX_CONFIG_BYTES = 256 * 1024
MAX_DEPTH = 12  # the format itself needs 6: root, mig-configs, a config, an entry, a field, a list
MAX_NODES = 50_000  # NVIDIA's default file has about 1,500
# A number's text, at most: a config's numbers are GPU indexes and instance counts. Python's
# int() refuses more than 4,300 digits with a ValueError, so a longer one must never reach it.
MAX_NUMBER_CHARS = 40
MAX_CONFIGS = 1_000
MAX_ENTRIES = 64  # per config
MAX_DEVICES = 64  # GPU indices per entry
MAX_DEVICE_INDEX = 1_023
MAX_PROFILES = 32  # mig-devices keys per entry
MAX_COUNT = 64  # instances of one profile in one entry

TOP_LEVEL_FIELDS = ("version", "mig-configs")
ENTRY_FIELDS = ("device-filter", "devices", "mig-enabled", "mig-devices")
_CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,252}")
# mig-parted's profile strings: "1g.10gb", "1g.10gb+me", "1c.3g.20gb", "1g.24gb-me", "+me.all"
_MIG_DEVICE = re.compile(r"(?:[1-9]\d*c\.)?[1-9]\d*g\.[1-9]\d*gb(?:[+-][a-z][a-z.]*)*")
_NUMBER_TAGS = frozenset(("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"))
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}"
    for t in ("str", "int", "bool", "null", "float", "map", "seq", "merge", "timestamp")
)


@dataclass(frozen=True)
class ConfigProblem:
    """What is wrong, and where: a path into the file (``mig-configs["x"][0].devices``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """The text is not a usable mig-parted config. ``problems`` lists every problem found."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class MigConfigEntry:
    """One item of a config's list: which GPUs, MIG on or off, and how many of each profile."""

    devices: str | tuple[int, ...]  # "all" or GPU indices
    mig_enabled: bool
    mig_devices: Mapping[str, int] = field(default_factory=dict, hash=False)
    device_filter: tuple[str, ...] = ()  # "0x233010DE"; empty: every GPU
    path: str = field(default="", compare=False)

    def applies_to(self, model: GpuModel) -> bool:
        """Whether the device filter lets this entry reach GPUs of ``model`` (a filter with a
        subsystem part, "0x234210DE:0x180910DE", may: the model is matched on the first part)."""
        if not self.device_filter:
            return True
        wanted = {parse_pci_device_id(p) for p in self.device_filter}
        return any(parse_pci_device_id(p) in wanted for p in model.pci_device_ids)

    def instances(self) -> list[InstanceRequest]:
        """The GPU instances the entry asks for, in the file's order, without starts."""
        return [
            InstanceRequest(profile)
            for profile, count in self.mig_devices.items()
            for _ in range(count)
        ]


@dataclass(frozen=True)
class MigPartedConfig:
    version: str
    configs: Mapping[str, tuple[MigConfigEntry, ...]] = field(hash=False)

    def names(self) -> list[str]:
        return list(self.configs)

    def config(self, name: str) -> tuple[MigConfigEntry, ...]:
        if name not in self.configs:
            raise KeyError(f"no config named {name}; the file has {', '.join(self.configs)}")
        return self.configs[name]


@dataclass(frozen=True)
class EntryCheck:
    """One entry that applies to the model, and its layout (None when MIG is off there)."""

    entry: MigConfigEntry
    layout: LayoutResult | None


@dataclass
class ConfigCheck:
    """A named config checked against a GPU model."""

    config: str
    model: GpuModel
    entries: list[EntryCheck]
    problems: list[ConfigProblem]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def errors(self) -> list[str]:
        return [str(p) for p in self.problems]


# ---------------------------------------------------------------------------------------------
# Paths


def key_path(parent: str, key: str) -> str:
    """``parent["key"]``: keys hold dots ("all-1g.10gb", "1g.10gb"), so they are quoted."""
    quoted = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{parent}["{quoted}"]'


def _field_path(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


# ---------------------------------------------------------------------------------------------
# Parsing


def _line(mark: Any) -> str:
    return f" (line {mark.line + 1})" if mark is not None else ""


def _mark(node: yaml.Node) -> str:
    mark = node.start_mark
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _check_nodes(root: yaml.Node, max_nodes: int) -> None:
    """Depth, size once aliases are expanded, plain tags, no duplicate keys."""
    visited = 0
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        visited += 1
        if visited > max_nodes:
            raise ConfigError([ConfigProblem("", _too_many_nodes(max_nodes))])
        if depth > MAX_DEPTH:
            raise ConfigError(
                [
                    ConfigProblem(
                        "",
                        f"the document nests deeper than {MAX_DEPTH} levels{_mark(node)}; a "
                        "mig-parted config needs 6",
                    )
                ]
            )
        if node.tag not in _PLAIN_TAGS:
            raise ConfigError([ConfigProblem("", f"tag {node.tag!r} is not allowed{_mark(node)}")])
        if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
            raise ConfigError(
                [
                    ConfigProblem(
                        "",
                        f"a number {len(node.value)} characters long{_mark(node)}; a "
                        f"mig-parted config's numbers have at most {MAX_NUMBER_CHARS}",
                    )
                ]
            )
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if key.value in seen:
                        raise ConfigError(
                            [
                                ConfigProblem(
                                    "",
                                    f"key {key.value!r} appears twice in one mapping"
                                    f"{_mark(key)}; YAML would keep only the last",
                                )
                            ]
                        )
                    seen.add(key.value)
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, depth + 1) for item in node.value)


def _too_many_nodes(max_nodes: int) -> str:
    return (
        f"the document expands to more than {max_nodes} nodes (aliases included); a "
        "mig-parted config is far smaller"
    )


def _too_deep(mark: Any) -> ConfigError:
    return ConfigError(
        [
            ConfigProblem(
                "",
                f"the document nests deeper than {MAX_DEPTH} levels{_line(mark)}; a mig-parted "
                "config needs 6",
            )
        ]
    )


class _CountingComposer(Composer):
    """PyYAML's composer (Python: it recurses once per level, so the depth is checked before
    it goes deeper) counting while it composes: every node, an alias as many as the node it
    names, and the depth, aliases expanded. Past ``max_nodes`` or ``MAX_DEPTH`` it stops at
    once, so no more of the text is parsed than the limit allows (the "billion laughs" and a
    file of a million tiny nodes cost the same). The events come from libyaml's parser where
    PyYAML has it (a state machine, no recursion; about six times faster), else PyYAML's."""

    # From the parser this is mixed with.
    check_event: Callable[..., bool]
    peek_event: Callable[[], Any]

    def _start_counting(self, max_nodes: int) -> None:
        self.max_nodes = max_nodes
        self.nodes = 0  # composed so far, aliases expanded
        self.depth = 0  # of the node being composed; the root is 1
        self.deepest = 0  # the deepest level reached under the node being composed
        self.extent: dict[int, tuple[int, int]] = {}  # id(anchored node) -> (nodes, height)

    def _count(self, nodes: int, mark: Any) -> None:
        self.nodes += nodes
        if self.nodes > self.max_nodes:
            raise ConfigError([ConfigProblem("", _too_many_nodes(self.max_nodes) + _line(mark))])

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None:  # else the composer's own "undefined alias" error
                if id(target) not in self.extent:  # inside the node it names: endless
                    raise _too_deep(event.start_mark)
                nodes, height = self.extent[id(target)]
                self._count(nodes, event.start_mark)
                self.deepest = max(self.deepest, self.depth + height)
                if self.deepest > MAX_DEPTH:
                    raise _too_deep(event.start_mark)
            return super().compose_node(parent, index)
        event = self.peek_event()
        before, outer_deepest = self.nodes, self.deepest
        self._count(1, event.start_mark)
        self.depth += 1
        if self.depth > MAX_DEPTH:  # before the composer recurses any further
            raise _too_deep(event.start_mark)
        self.deepest = self.depth
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self.extent[id(node)] = (self.nodes - before, self.deepest - self.depth + 1)
        self.depth -= 1
        self.deepest = max(outer_deepest, self.deepest)
        return node


if _LibyamlParser is not None:

    class _BoundedLoader(_CountingComposer, _LibyamlParser, SafeConstructor, Resolver):
        def __init__(self, text: str, *, max_nodes: int) -> None:
            _LibyamlParser.__init__(self, text)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            Composer.__init__(self)
            self._start_counting(max_nodes)

else:  # pragma: no cover - PyYAML built without libyaml

    class _BoundedLoader(_CountingComposer, yaml.SafeLoader):  # type: ignore[no-redef]
        def __init__(self, text: str, *, max_nodes: int) -> None:
            yaml.SafeLoader.__init__(self, text)
            self._start_counting(max_nodes)


def _load_yaml(text: str, *, max_nodes: int = MAX_NODES) -> Any:
    loader = _BoundedLoader(text, max_nodes=max_nodes)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, max_nodes)
        return loader.construct_document(node)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: a value the constructor refuses
        if isinstance(exc, ConfigError):
            raise
        if "exceeded maximum nesting depth" in str(exc):  # libyaml's scanner, reading ahead
            raise _too_deep(getattr(exc, "problem_mark", None)) from exc
        raise ConfigError([ConfigProblem("", f"not valid YAML: {exc}")]) from exc
    except RecursionError as exc:
        raise _too_deep(None) from exc
    finally:
        loader.dispose()


def parse_mig_parted_config(
    text: str | bytes, *, max_bytes: int = MAX_CONFIG_BYTES, max_nodes: int = MAX_NODES
) -> MigPartedConfig:
    """Parse a mig-parted config file's text; ``ConfigError`` lists every problem. A caller
    reading text from strangers passes tighter ``max_bytes`` and ``max_nodes``."""
    if isinstance(text, bytes):
        if len(text) > max_bytes:
            raise ConfigError(
                [ConfigProblem("", f"the file is {len(text)} bytes; at most {max_bytes}")]
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError([ConfigProblem("", f"the file is not UTF-8: {exc}")]) from exc
    if len(text) > max_bytes or len(text.encode("utf-8")) > max_bytes:
        raise ConfigError(
            [
                ConfigProblem(
                    "", f"the file is {len(text.encode('utf-8'))} bytes; at most {max_bytes}"
                )
            ]
        )
    return parse_mig_parted_data(_load_yaml(text, max_nodes=max_nodes))


def read_mig_parted_config(path: Path | str) -> MigPartedConfig:
    return parse_mig_parted_config(Path(path).read_bytes())


def parse_mig_parted_data(data: Any) -> MigPartedConfig:
    """Check already-loaded data (a dict as from JSON or YAML) against the v1 spec."""
    problems: list[ConfigProblem] = []
    if not isinstance(data, Mapping):
        raise ConfigError(
            [ConfigProblem("", "a mig-parted config is a mapping with version and mig-configs")]
        )
    for key in data:
        if key not in TOP_LEVEL_FIELDS:
            problems.append(
                ConfigProblem(
                    _field_path("", str(key)),
                    "unexpected field; a mig-parted config has version and mig-configs",
                )
            )
    version = data.get("version")
    if "version" not in data:
        problems.append(ConfigProblem("version", "missing; write version: v1"))
    elif version != SPEC_VERSION:
        problems.append(ConfigProblem("version", f"{version!r} is not supported; write v1"))
    configs: dict[str, tuple[MigConfigEntry, ...]] = {}
    raw_configs = data.get("mig-configs")
    if "mig-configs" not in data:
        problems.append(ConfigProblem("mig-configs", "missing"))
    elif not isinstance(raw_configs, Mapping) or not raw_configs:
        problems.append(ConfigProblem("mig-configs", "must map config names to lists of entries"))
    elif len(raw_configs) > MAX_CONFIGS:
        problems.append(
            ConfigProblem("mig-configs", f"{len(raw_configs)} configs; at most {MAX_CONFIGS}")
        )
    else:
        for name, raw_entries in raw_configs.items():
            path = key_path("mig-configs", str(name))
            if not isinstance(name, str) or not _CONFIG_NAME.fullmatch(name):
                problems.append(
                    ConfigProblem(
                        path,
                        "a config name is letters, digits, '.', '_', '+' and '-' "
                        "(at most 253), like all-1g.10gb",
                    )
                )
                continue
            if not isinstance(raw_entries, list) or not raw_entries:
                problems.append(ConfigProblem(path, "must be a non-empty list of entries"))
                continue
            if len(raw_entries) > MAX_ENTRIES:
                problems.append(
                    ConfigProblem(path, f"{len(raw_entries)} entries; at most {MAX_ENTRIES}")
                )
                continue
            entries = []
            for index, raw in enumerate(raw_entries):
                entry = _parse_entry(raw, f"{path}[{index}]", problems)
                if entry is not None:
                    entries.append(entry)
            configs[name] = tuple(entries)
    if problems:
        raise ConfigError(problems)
    return MigPartedConfig(str(version), MappingProxyType(configs))


def _parse_entry(raw: Any, path: str, problems: list[ConfigProblem]) -> MigConfigEntry | None:
    before = len(problems)
    if not isinstance(raw, Mapping):
        problems.append(
            ConfigProblem(path, "an entry is a mapping with devices, mig-enabled, mig-devices")
        )
        return None
    for key in raw:
        if key not in ENTRY_FIELDS:
            problems.append(
                ConfigProblem(
                    _field_path(path, str(key)),
                    "unexpected field; an entry has " + ", ".join(ENTRY_FIELDS),
                )
            )
    device_filter = _parse_device_filter(raw, path, problems)
    devices = _parse_devices(raw, path, problems)
    enabled = raw.get("mig-enabled")
    if "mig-enabled" not in raw:
        problems.append(ConfigProblem(_field_path(path, "mig-enabled"), "missing (true or false)"))
    elif not isinstance(enabled, bool):
        problems.append(
            ConfigProblem(
                _field_path(path, "mig-enabled"), f"must be true or false, not {enabled!r}"
            )
        )
    mig_devices = _parse_mig_devices(raw, path, problems, enabled is True)
    if len(problems) > before or devices is None or not isinstance(enabled, bool):
        return None
    return MigConfigEntry(
        devices=devices,
        mig_enabled=enabled,
        mig_devices=MappingProxyType(mig_devices),
        device_filter=device_filter,
        path=path,
    )


def _parse_device_filter(
    raw: Mapping[str, Any], path: str, problems: list[ConfigProblem]
) -> tuple[str, ...]:
    if "device-filter" not in raw:
        return ()
    where = _field_path(path, "device-filter")
    value = raw["device-filter"]
    if isinstance(value, int) and not isinstance(value, bool):
        problems.append(
            ConfigProblem(
                where,
                f"YAML reads an unquoted {value:#x} as a number; quote it: "
                f'"{format_pci_device_id(parse_pci_device_id(value) or value)}"',
            )
        )
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        problems.append(ConfigProblem(where, "must be a PCI id or a list of them, like 0x20B210DE"))
        return ()
    if len(items) > MAX_DEVICES:
        problems.append(ConfigProblem(where, f"{len(items)} ids; at most {MAX_DEVICES}"))
        return ()
    out = []
    for index, item in enumerate(items):
        item_where = where if isinstance(value, str) else f"{where}[{index}]"
        primary, _, subsystem = item.strip().partition(":")
        number = parse_pci_device_id(primary) if primary.lower().startswith("0x") else None
        if number is None or (subsystem and parse_pci_device_id(subsystem) is None):
            problems.append(ConfigProblem(item_where, f"{item!r} is not a PCI id like 0x20B210DE"))
            continue
        if len(primary) <= 6:  # "0x20B2": mig-parted would read vendor 0x20B2 and match nothing
            problems.append(
                ConfigProblem(
                    item_where,
                    f"{item!r} lacks the vendor half; write {format_pci_device_id(number)} "
                    "(device id << 16 | 0x10DE)",
                )
            )
            continue
        out.append(item.strip().upper().replace("0X", "0x"))
    return tuple(out)


def _parse_devices(
    raw: Mapping[str, Any], path: str, problems: list[ConfigProblem]
) -> str | tuple[int, ...] | None:
    where = _field_path(path, "devices")
    if "devices" not in raw:
        problems.append(ConfigProblem(where, "missing; write all or a list of GPU indices"))
        return None
    value = raw["devices"]
    if value == "all":
        return "all"
    if isinstance(value, int) and not isinstance(value, bool):
        problems.append(
            ConfigProblem(
                where,
                f"a bare {value} is refused by mig-parted; write [{value}] (NVIDIA/mig-parted#44)",
            )
        )
        return None
    if not isinstance(value, list) or not value:
        problems.append(ConfigProblem(where, "must be all or a non-empty list of GPU indices"))
        return None
    if len(value) > MAX_DEVICES:
        problems.append(ConfigProblem(where, f"{len(value)} indices; at most {MAX_DEVICES}"))
        return None
    indices: list[int] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= MAX_DEVICE_INDEX:
            problems.append(
                ConfigProblem(f"{where}[{index}]", f"{item!r} is not a GPU index (0, 1, ...)")
            )
        elif item in indices:
            problems.append(ConfigProblem(f"{where}[{index}]", f"GPU {item} is listed twice"))
        else:
            indices.append(item)
    return tuple(indices) if len(indices) == len(value) else None


def _parse_mig_devices(
    raw: Mapping[str, Any], path: str, problems: list[ConfigProblem], enabled: bool
) -> dict[str, int]:
    where = _field_path(path, "mig-devices")
    if "mig-devices" not in raw or raw["mig-devices"] is None:
        if enabled:
            problems.append(
                ConfigProblem(where, "missing; required when mig-enabled is true ({} for none)")
            )
        return {}
    value = raw["mig-devices"]
    if not isinstance(value, Mapping):
        problems.append(ConfigProblem(where, 'must map profiles to counts, like {"1g.10gb": 7}'))
        return {}
    if not enabled and value:
        problems.append(ConfigProblem(where, "must be empty when mig-enabled is false"))
        return {}
    if len(value) > MAX_PROFILES:
        problems.append(ConfigProblem(where, f"{len(value)} profiles; at most {MAX_PROFILES}"))
        return {}
    out: dict[str, int] = {}
    for profile, count in value.items():
        item = key_path(where, str(profile))
        if not isinstance(profile, str) or not _MIG_DEVICE.fullmatch(profile):
            problems.append(
                ConfigProblem(item, f"{profile!r} is not a MIG profile name like 1g.10gb")
            )
            continue
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_COUNT:
            problems.append(
                ConfigProblem(
                    item, f"the count must be a whole number 0-{MAX_COUNT}, not {count!r}"
                )
            )
            continue
        if count:
            out[profile] = count
    return out


# ---------------------------------------------------------------------------------------------
# Checking against a GPU model


def validate_config(config: MigPartedConfig, name: str, model: GpuModel) -> ConfigCheck:
    """Check config ``name`` for GPUs of ``model``: each entry whose device filter reaches the
    model must give a valid layout. ``KeyError`` when the file has no such config."""
    entries = config.config(name)
    checks: list[EntryCheck] = []
    problems: list[ConfigProblem] = []
    for entry in entries:
        if not entry.applies_to(model):
            continue
        if not entry.mig_enabled:
            checks.append(EntryCheck(entry, None))
            continue
        keys = [profile for profile, count in entry.mig_devices.items() for _ in range(count)]
        result = validate_layout(model, entry.instances())
        checks.append(EntryCheck(entry, result))
        for issue in result.issues:
            problems.append(ConfigProblem(_issue_path(entry, keys, issue), issue.message))
    if not checks:
        filters = sorted({f for e in entries for f in e.device_filter})
        problems.append(
            ConfigProblem(
                key_path("mig-configs", name),
                f"no entry applies to {model.name} ({', '.join(model.pci_device_ids)}); its "
                f"device filters name {', '.join(filters)}. mig-parted would leave such GPUs "
                "unchanged",
            )
        )
    return ConfigCheck(name, model, checks, problems)


def _issue_path(entry: MigConfigEntry, keys: Sequence[str], issue: LayoutIssue) -> str:
    where = _field_path(entry.path, "mig-devices")
    if issue.instance is None:
        return where
    return key_path(where, keys[issue.instance])


def configs_valid_for(config: MigPartedConfig, model: GpuModel) -> list[str]:
    """The names of the configs that give ``model`` a valid layout, in the file's order."""
    return [name for name in config.configs if validate_config(config, name, model).ok]


# ---------------------------------------------------------------------------------------------
# Writing


def _profile_order(name: str) -> tuple[int, int, str]:
    match = PROFILE_NAME.fullmatch(name)
    if match is None:
        return (1_000, 0, name)
    return (int(match["g"]), int(match["gb"]), name)


def mig_devices_for(instances: Iterable[Placement | InstanceRequest]) -> dict[str, int]:
    """Profile counts for a layout, smallest profile first (mig-parted's own files' order)."""
    counts: dict[str, int] = {}
    for instance in instances:
        counts[instance.profile] = counts.get(instance.profile, 0) + 1
    return {name: counts[name] for name in sorted(counts, key=_profile_order)}


def entry_for_layout(
    instances: Iterable[Placement | InstanceRequest],
    *,
    devices: str | Sequence[int] = "all",
    device_filter: Sequence[str] = (),
    mig_enabled: bool = True,
) -> MigConfigEntry:
    """A config entry that asks for ``instances`` (their starts are not kept)."""
    counts = mig_devices_for(instances) if mig_enabled else {}
    return MigConfigEntry(
        devices=devices if isinstance(devices, str) else tuple(devices),
        mig_enabled=mig_enabled,
        mig_devices=MappingProxyType(counts),
        device_filter=tuple(device_filter),
    )


def _entry_data(entry: MigConfigEntry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if entry.device_filter:
        out["device-filter"] = list(entry.device_filter)
    out["devices"] = entry.devices if isinstance(entry.devices, str) else list(entry.devices)
    out["mig-enabled"] = entry.mig_enabled
    if entry.mig_enabled:
        out["mig-devices"] = dict(entry.mig_devices)
    return out


def render_mig_parted_config(configs: Mapping[str, Sequence[MigConfigEntry]]) -> str:
    """A mig-parted v1 file holding ``configs`` (config name -> entries), in the given order.
    What it writes parses back to the same entries."""
    data = {
        "version": SPEC_VERSION,
        "mig-configs": {
            name: [_entry_data(e) for e in entries] for name, entries in configs.items()
        },
    }
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    parse_mig_parted_config(text)  # what we write, we can read (and so can mig-parted)
    return text
