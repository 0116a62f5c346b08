"""Fault injection and request counters for tests (the ``/_devcluster/`` admin API)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from devcluster.errors import ApiError, bad_request

FAULT_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
VERBS = frozenset(
    {"list", "get", "create", "update", "patch", "apply", "delete", "deletecollection", "watch"}
)


@dataclass
class FaultRule:
    """Matches API requests on resources; ``count=None`` means until cleared."""

    status: int | None = 500
    count: int | None = 1
    delay_s: float = 0.0
    methods: frozenset[str] = frozenset()
    verbs: frozenset[str] = frozenset()
    path_contains: str = ""
    probability: float | None = None
    retry_after_s: int | None = None
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def from_json(cls, data: Any) -> FaultRule:
        if not isinstance(data, dict):
            raise bad_request("a fault is a JSON object")
        unknown = set(data) - {
            "status", "count", "delay_s", "methods", "verbs", "path_contains", "probability", "seed",
            "retry_after_s",
        }  # fmt: skip
        if unknown:
            raise bad_request(f"unknown fault fields: {sorted(unknown)}")
        status = data.get("status", 500)
        if status is not None and status not in FAULT_STATUSES:
            raise bad_request(f"status must be one of {sorted(FAULT_STATUSES)} or null")
        probability = data.get("probability")
        count = data.get("count", None if probability is not None else 1)
        if count is not None and (not isinstance(count, int) or count < 1):
            raise bad_request("count must be a positive integer or null")
        if probability is not None and not 0 <= float(probability) <= 1:
            raise bad_request("probability must be between 0 and 1")
        verbs = frozenset(data.get("verbs") or ())
        if verbs - VERBS:
            raise bad_request(f"unknown verbs {sorted(verbs - VERBS)}")
        return cls(
            status=status,
            count=count,
            delay_s=float(data.get("delay_s") or 0.0),
            methods=frozenset(m.upper() for m in data.get("methods") or ()),
            verbs=verbs,
            path_contains=str(data.get("path_contains") or ""),
            probability=None if probability is None else float(probability),
            retry_after_s=None if data.get("retry_after_s") is None else int(data["retry_after_s"]),
            rng=random.Random(data.get("seed")),  # noqa: S311 - test randomness, not crypto
        )

    def matches(self, method: str, verb: str, path_qs: str) -> bool:
        if self.methods and method not in self.methods:
            return False
        if self.verbs and verb not in self.verbs:
            return False
        if self.path_contains and self.path_contains not in path_qs:
            return False
        return self.probability is None or self.rng.random() < self.probability

    def describe(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "count": self.count,
            "delay_s": self.delay_s,
            "methods": sorted(self.methods),
            "verbs": sorted(self.verbs),
            "path_contains": self.path_contains,
            "probability": self.probability,
            "retry_after_s": self.retry_after_s,
        }


class Faults:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []
        self.injected = 0

    def add(self, rule: FaultRule) -> None:
        self.rules.append(rule)

    def clear(self) -> None:
        self.rules.clear()

    def take(self, method: str, verb: str, path_qs: str) -> FaultRule | None:
        """The first rule matching this request, its count used up by one."""
        for rule in self.rules:
            if rule.matches(method, verb, path_qs):
                if rule.count is not None:
                    rule.count -= 1
                    if rule.count <= 0:
                        self.rules.remove(rule)
                self.injected += 1
                return rule
        return None


def fault_error(status: int, retry_after_s: int | None = None) -> ApiError:
    """The Status a real server would answer. ``retry_after_s`` adds ``Retry-After`` (and
    ``details.retryAfterSeconds``), as a real 429 does: urllib3 and client-go then retry GETs
    on their own, so it is off unless asked for."""
    message = {
        408: "the request timed out (fault injected by devcluster)",
        409: "the object has been modified; please apply your changes to the latest version "
        "and try again (fault injected by devcluster)",
        429: "too many requests, please try again later (fault injected by devcluster)",
        500: "an error on the server has prevented the request from succeeding (fault injected "
        "by devcluster)",
        502: "bad gateway (fault injected by devcluster)",
        503: "the server is currently unable to handle the request (fault injected by devcluster)",
        504: "the server was unable to return a response in the time allotted (fault injected "
        "by devcluster)",
    }[status]
    reason = {408: "Timeout", 502: "InternalError", 504: "Timeout"}.get(status)
    details = {"retryAfterSeconds": retry_after_s} if retry_after_s is not None else None
    return ApiError(status, message, reason=reason, details=details)


class Stats:
    """Requests on resources since the last reset, by verb, by kind and by both."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.verbs: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.verb_kinds: Counter[str] = Counter()
        self.discovery = 0
        self.faults_injected = 0

    def count(self, verb: str, kind: str) -> None:
        self.verbs[verb] += 1
        self.kinds[kind] += 1
        self.verb_kinds[f"{verb} {kind}"] += 1

    def snapshot(self) -> dict[str, Any]:
        return {
            "total": sum(self.verbs.values()),
            "verbs": dict(self.verbs),
            "kinds": dict(self.kinds),
            "verb_kinds": dict(self.verb_kinds),
            "discovery": self.discovery,
            "faults_injected": self.faults_injected,
        }
