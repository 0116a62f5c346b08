"""The node agent's report, checked against its JSON Schema (``report.schema.json`` beside this
file, draft 2020-12; PROTOCOL.md describes the protocol): the agent checks what it built before
sending it, the portal what it received, with the same rules.

``validate_report(data)`` lists the problems, each with the path of the field (``gpus[0].uuid``,
as the portal's 400 answers name fields) and why; an empty list is a valid report. The check runs
in compiled code (jsonschema-rs). What a schema cannot say (a change report's base, duplicate
UUIDs, GPUs of another node) the portal checks after it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs

SCHEMA_PATH = Path(__file__).resolve().with_name("report.schema.json")
ROOT = "non_field_errors"  # the path of a problem with the report as a whole


@dataclass(frozen=True)
class Problem:
    path: str  # "gpus[0].instances[1].start"; ROOT for the report as a whole
    message: str


@functools.cache
def report_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return schema


@functools.cache
def _validator() -> Any:
    return jsonschema_rs.validator_for(report_schema(), validate_formats=True)


def _path(steps: Any) -> str:
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out or ROOT


@functools.cache
def _pattern_rules() -> dict[str, str]:
    """Each pattern of the schema's ``$defs`` -> its description, the rule a refusal names."""
    return {
        d["pattern"]: d["description"]
        for d in report_schema()["$defs"].values()
        if "pattern" in d and "description" in d
    }


def _shown(value: Any) -> str:
    """A refused value as a message quotes it: short text whole, anything longer cut."""
    text = json.dumps(value, ensure_ascii=True) if isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _pattern_message(error: Any) -> str:
    rule = _pattern_rules().get(error.kind.pattern, f"matching {error.kind.pattern}")
    return f"{_shown(error.instance)} is not {rule}."


def _type_message(error: Any) -> str:
    types = [t for t in error.kind.types if t != "null"]
    nullable = " (or null)" if "null" in error.kind.types else ""
    return f"Expected {' or '.join(types)}{nullable}, got {_shown(error.instance)}."


# A refusal's message by the keyword that refused it (jsonschema-rs's own message quotes the
# whole refused value: a list of 65 GPUs, for one).
_MESSAGES: dict[str, Callable[[Any], str]] = {
    "Type": _type_message,
    "Pattern": _pattern_message,
    "MaxLength": lambda e: f"{len(e.instance)} characters; at most {e.kind.limit} are allowed.",
    "MinLength": lambda e: "This field may not be blank.",
    "MaxItems": lambda e: f"{len(e.instance)} items; at most {e.kind.limit} are accepted.",
    "Minimum": lambda e: f"Must be at least {e.kind.limit}.",
    "Maximum": lambda e: f"Must be at most {e.kind.limit}.",
    "Enum": lambda e: f"{_shown(e.instance)} is not one of {', '.join(map(str, e.kind.options))}.",
    "Format": lambda e: f"{_shown(e.instance)} is not a {e.kind.format} (RFC 3339).",
}


def _problem(error: Any) -> Problem:
    path = list(error.instance_path)
    kind = type(error.kind).__name__
    if kind.endswith("AdditionalProperties"):
        # The unexpected field is named by its own path, as the portal's 400 answers name it.
        for name in error.kind.unexpected:
            return Problem(_path([*path, name]), "Unknown field.")
    if kind.endswith("Required"):
        return Problem(_path([*path, error.kind.property]), "This field is required.")
    message = _MESSAGES.get(kind)
    return Problem(_path(path), message(error) if message else error.message)


def validate_report(data: Any) -> list[Problem]:
    """The problems of report ``data`` (parsed JSON), one a field, in the schema's order; []
    when valid."""
    validator = _validator()
    if validator.is_valid(data):
        return []
    problems: dict[str, Problem] = {}
    for error in validator.iter_errors(data):  # one problem a field: the first rule it breaks
        problem = _problem(error)
        problems.setdefault(problem.path, problem)
    return list(problems.values())


@functools.cache
def _node_name_validator() -> Any:
    return jsonschema_rs.validator_for(report_schema()["$defs"]["nodeName"])


def node_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a Kubernetes node name (a DNS-1123 subdomain, the rule of a report's
    ``node``), or None when it is one."""
    validator = _node_name_validator()
    if validator.is_valid(name):
        return None
    return next(_problem(error).message for error in validator.iter_errors(name))


def pod_memory(processes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """GPU memory per pod (NVML's usedGpuMemory of its processes, summed, MiB) and its SM use
    (their process utilisation, summed and held to 100; None with no sample): what each
    container of a shared (vGPU) GPU holds and computes, as a change report's ``pod_memory``
    says it. Pods whose processes NVML gives no memory figure for are left out. The agent
    builds it; the portal builds the same from a full report's processes."""
    used: dict[str, int] = {}
    sm: dict[str, int] = {}
    for p in processes:
        uid, mib, util = p.get("pod_uid"), p.get("used_memory_mib"), p.get("sm_util_pct")
        if uid and mib is not None:
            used[uid] = used.get(uid, 0) + int(mib)
            if util is not None:
                sm[uid] = min(100, sm.get(uid, 0) + int(util))
    return [
        {"pod_uid": uid, "used_memory_mib": mib, "sm_util_pct": sm.get(uid)}
        for uid, mib in used.items()
    ]
