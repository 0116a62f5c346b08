"""Label and field selectors in the Kubernetes query syntax."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devcluster.errors import bad_request

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[A-Za-z0-9_.-]*"
_SET_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_COMPARE_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=|>|<)\s*({_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if not present:
            return False
        try:
            number, bound = int(value or ""), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.operator == ">" else number < bound


def _split_requirements(selector: str) -> list[str]:
    """Split on commas outside ``( )``."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def parse_label_selector(selector: str | None) -> list[Requirement]:
    if not selector:
        return []
    requirements: list[Requirement] = []
    for part in _split_requirements(selector):
        if match := _SET_RE.match(part):
            negated, key, operator, raw_values = match.groups()
            if negated:
                raise bad_request(f"unable to parse requirement: {part.strip()!r}")
            values = tuple(v.strip() for v in raw_values.split(",") if v.strip())
            requirements.append(Requirement(key, operator, values))
        elif match := _COMPARE_RE.match(part):
            key, operator, value = match.groups()
            requirements.append(Requirement(key, "=" if operator == "==" else operator, (value,)))
        elif match := _EXISTS_RE.match(part):
            negated, key = match.groups()
            requirements.append(Requirement(key, "!" if negated else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part.strip()!r}")
    return requirements


def labels_match(requirements: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(requirement.matches(labels) for requirement in requirements)


# Field selectors every kind supports, plus a few kind-specific ones a real server also has.
_FIELDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda o: (o.get("metadata") or {}).get("name", ""),
    "metadata.namespace": lambda o: (o.get("metadata") or {}).get("namespace", ""),
    "status.phase": lambda o: str((o.get("status") or {}).get("phase", "")),
    "spec.nodeName": lambda o: str((o.get("spec") or {}).get("nodeName", "")),
}


def _field_check(
    getter: Callable[[Mapping[str, Any]], str], expected: str, *, negated: bool
) -> Callable[[Mapping[str, Any]], bool]:
    def check(obj: Mapping[str, Any]) -> bool:
        return (getter(obj) == expected) != negated

    return check


def parse_field_selector(selector: str | None, kind: str) -> Callable[[Mapping[str, Any]], bool]:
    if not selector:
        return lambda _obj: True
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in _split_requirements(selector):
        match = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*", part)
        if not match:
            raise bad_request(f"invalid field selector: {part.strip()!r}")
        field_name, operator, expected = match.groups()
        getter = _FIELDS.get(field_name)
        if getter is None or (field_name.startswith(("status.", "spec.")) and kind != "Pod"):
            raise bad_request(f'field label not supported: "{field_name}"')
        checks.append(_field_check(getter, expected, negated=operator == "!="))
    return lambda obj: all(check(obj) for check in checks)


_SELECTOR_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``) against labels; an
    absent or empty selector matches everything. An unknown operator matches nothing."""
    if not selector:
        return True
    requirements = [
        Requirement(str(key), "=", (str(value),))
        for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = _SELECTOR_OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            return False
        values = tuple(str(v) for v in expression.get("values") or ())
        requirements.append(Requirement(str(expression.get("key", "")), operator, values))
    return all(requirement.matches(labels) for requirement in requirements)
