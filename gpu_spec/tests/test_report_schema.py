"""The agent report's JSON Schema (gpu_spec.report): a report as the agent builds it passes, and
each refusal names the field by the path the portal's 400 answers use, and why."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpu_spec.report import ROOT, SCHEMA_PATH, Problem, validate_report

REPORT: dict[str, Any] = {
    "node": "gpu-node-1",
    "sent_at": "2026-12-03T08:00:00+01:00",
    "agent_version": "1.0",
    "driver_version": "580.65",
    "protocol": 2,
    "session": "0123abcd",
    "seq": 3,
    "full": False,
    "base": 2,
    "base_digest": "ab" * 32,
    "digest": "cd" * 32,
    "gpus": [
        {
            "uuid": "GPU-3f5a9c1e-7b2d-4e8f-a1b2-c3d4e5f60718",
            "index": 0,
            "name": "NVIDIA A100-SXM4-80GB",
            "memory_total_mib": 81920,
            "memory_used_mib": 100,
            "utilization_pct": None,
            "mig_mode_current": True,
            "mig_mode_pending": True,
            "applied_generation": 2,
            "instances": [
                {
                    "gi_id": 1,
                    "profile": "3g.40gb",
                    "start": 0,
                    "size": 4,
                    "ci_ids": [0],
                    "memory_used_mib": 10,
                    "utilization_pct": 30,
                    "processes": [{"pid": 4242, "used_memory_mib": 10, "pod_uid": ""}],
                }
            ],
            "processes": [],
        }
    ],
    "readings": [
        {
            "uuid": "GPU-3f5a9c1e-7b2d-4e8f-a1b2-c3d4e5f60718",
            "model": "NVIDIA A100-SXM4-80GB",
            "gi_id": 1,
            "profile": "3g.40gb",
            "utilization_pct": 30,
            "memory_used_mib": 10,
            "processes": 1,
            "pod_uids": [],
        }
    ],
}


def edited(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(REPORT)
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


def test_the_schema_is_draft_2020_12_and_a_full_report_passes() -> None:
    assert json.loads(SCHEMA_PATH.read_text())["$schema"].endswith("/2020-12/schema")
    assert validate_report(REPORT) == []
    minimal = {"node": "gpu-node-1", "sent_at": "2026-12-03T07:00:00Z", "gpus": []}
    assert validate_report(minimal) == []


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("node",), "", "node"),
        (("node",), "n" * 254, "node"),  # a Kubernetes node name: at most 253 characters
        (("node",), "ip-10-0-1-23..ec2", "node"),
        (("sent_at",), "yesterday", "sent_at"),
        (("protocol",), 3, "protocol"),
        (("session",), "XYZ", "session"),
        (("seq",), 0, "seq"),
        (("gpus",), [REPORT["gpus"][0]] * 65, "gpus"),
        (("gpus", 0, "uuid"), "GPU-a/b", "gpus[0].uuid"),
        (("gpus", 0, "uuid"), "nvidia0", "gpus[0].uuid"),
        (("gpus", 0, "index"), "0", "gpus[0].index"),
        (("gpus", 0, "index"), True, "gpus[0].index"),
        (("gpus", 0, "utilization_pct"), 101, "gpus[0].utilization_pct"),
        (("gpus", 0, "mig_mode_current"), 1, "gpus[0].mig_mode_current"),
        (("gpus", 0, "name"), "N" * 101, "gpus[0].name"),
        (("gpus", 0, "instances", 0, "start"), -1, "gpus[0].instances[0].start"),
        (("gpus", 0, "instances", 0, "ci_ids"), [0, "1"], "gpus[0].instances[0].ci_ids[1]"),
        (
            ("gpus", 0, "instances", 0, "processes", 0, "pid"),
            None,
            "gpus[0].instances[0].processes[0].pid",
        ),
        (("readings", 0, "pod_uids"), ["p" * 65], "readings[0].pod_uids[0]"),
        # Text without control characters (PostgreSQL stores no NUL in text).
        (("driver_version",), "580\x00", "driver_version"),
        (("gpus", 0, "name"), "NVIDIA\nA100", "gpus[0].name"),
        (
            ("gpus", 0, "instances", 0, "processes", 0, "pod_uid"),
            "\x07",
            "gpus[0].instances[0].processes[0].pod_uid",
        ),
        (("readings", 0, "profile"), "3g\x00", "readings[0].profile"),
    ],
)
def test_a_bad_value_is_named_by_its_path(path: tuple[Any, ...], value: Any, named: str) -> None:
    problems = validate_report(edited(path, value))
    assert [p.path for p in problems] == [named], problems
    assert problems[0].message


def test_unknown_and_missing_fields_are_named() -> None:
    body = edited(("gpus", 0, "surprise"), True)
    del body["gpus"][0]["uuid"]
    del body["sent_at"]
    problems = validate_report(body)
    assert Problem("gpus[0].surprise", "Unknown field.") in problems
    assert Problem("gpus[0].uuid", "This field is required.") in problems
    assert Problem("sent_at", "This field is required.") in problems


@pytest.mark.parametrize("body", [[], "text", None, 7])
def test_a_body_that_is_not_an_object_is_refused_as_a_whole(body: Any) -> None:
    assert [p.path for p in validate_report(body)] == [ROOT]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("gpus",), [REPORT["gpus"][0]] * 65, "65 items; at most 64 are accepted."),
        (("gpus", 0, "name"), "N" * 101, "101 characters; at most 100 are allowed."),
        (("gpus", 0, "index"), "0", 'Expected integer, got "0".'),
        (("gpus", 0, "utilization_pct"), 101, "Must be at most 100."),
        (("seq",), 0, "Must be at least 1."),
        (("protocol",), 3, "3 is not one of 1, 2."),
        (("session",), "XYZ", '"XYZ" is not lower-case hexadecimal.'),
        (("sent_at",), "yesterday", '"yesterday" is not a date-time (RFC 3339).'),
        (("gpus", 0, "instances", 0, "profile"), "", "This field may not be blank."),
        (
            ("gpus", 0, "uuid"),
            "GPU-a/b",
            '"GPU-a/b" is not an NVML UUID: GPU-<hex and dashes> or MIG-<hex and dashes>.',
        ),
    ],
)
def test_a_refusal_says_why_without_quoting_a_large_value(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    assert [p.message for p in validate_report(edited(path, value))] == [message]
