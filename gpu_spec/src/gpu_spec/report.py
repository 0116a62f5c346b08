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


def _problem(error: Any) -> Problem:
    path = list(error.instance_path)
    kind = type(error.kind).__name__
    if kind.endswith("AdditionalProperties"):
        # The unexpected field is named by its own path, as the portal's 400 answers name it.
        for name in error.kind.unexpected:
            return Problem(_path([*path, name]), "Unknown field.")
    if kind.endswith("Required"):
        return Problem(_path([*path, error.kind.property]), "This field is required.")
    return Problem(_path(path), error.message)


def validate_report(data: Any) -> list[Problem]:
    """The problems of report ``data`` (parsed JSON), in the schema's order; [] when valid."""
    validator = _validator()
    if validator.is_valid(data):
        return []
    return [_problem(error) for error in validator.iter_errors(data)]
