"""A Kubernetes field path and its value in words, for the pages that show what changed on a
cluster (the console's drift repairs): ".spec.stopPolicy: Hold" reads "New work: held".

Each rule is a pattern of the path, the words for it (groups of the pattern fill them in), and,
for fields with a few known values, those values in words. A path no rule knows is said from
its last name ("someFieldName" -> "Some field name").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    words: str
    values: dict[str, str] = field(default_factory=dict)


_BOOLEANS_RUN = {"true": "running", "false": "paused"}

_RULES = [
    _Rule(re.compile(r"\.spec\.stopPolicy"), "New work",
          {"None": "accepted", "Hold": "held", "HoldAndDrain": "held, running work evicted"}),
    _Rule(re.compile(r"\.spec\.active"), "Workload", _BOOLEANS_RUN),
    _Rule(re.compile(r"\.spec\.hard\.(?P<resource>.+)"), "Limit of {resource}"),
    _Rule(re.compile(r"\.spec\.resourceGroups\[\d+\]\.flavors\[(?P<f>\d+)\]\.resources\[(?P<r>\d+)\]"
                     r"\.nominalQuota"), "Guarantee (flavor {f}, resource {r})"),
    _Rule(re.compile(r"\.spec\.resourceGroups\[\d+\]\.flavors\[(?P<f>\d+)\]\.resources\[(?P<r>\d+)\]"
                     r"\.borrowingLimit"), "Borrowing limit (flavor {f}, resource {r})"),
    _Rule(re.compile(r"\.spec\.resourceGroups\[\d+\]\.flavors\[(?P<f>\d+)\]\.resources\[(?P<r>\d+)\]"
                     r"\.lendingLimit"), "Lending limit (flavor {f}, resource {r})"),
    _Rule(re.compile(r"\.spec\.resourceGroups.*"), "Flavors and resources"),
    _Rule(re.compile(r"\.spec\.cohort(Name)?"), "Cohort"),
    _Rule(re.compile(r"\.spec\.clusterQueue"), "Queue it feeds"),
    _Rule(re.compile(r"\.spec\.namespaceSelector.*"), "Namespaces it admits"),
    _Rule(re.compile(r"\.spec\.queueingStrategy"), "Queueing order",
          {"BestEffortFIFO": "first in, first out (best effort)",
           "StrictFIFO": "strictly first in, first out"}),
    _Rule(re.compile(r"\.spec\.preemption.*"), "Preemption rules"),
    _Rule(re.compile(r"\.spec\.fairSharing\.weight"), "Fair-sharing weight"),
    _Rule(re.compile(r"\.spec\.limits.*"), "Default container limits"),
    _Rule(re.compile(r"\.spec\.scopeSelector.*|\.spec\.scopes.*"), "Workloads the quota counts"),
    _Rule(re.compile(r"\.(subjects|roleRef).*"), "Who may use it"),
    _Rule(re.compile(r"\.metadata\.labels\.(?P<key>.+)"), "Label {key}"),
    _Rule(re.compile(r"\.metadata\.annotations\.(?P<key>.+)"), "Note {key}"),
]  # fmt: skip

_INDEX = re.compile(r"\[\d+\]")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@dataclass(frozen=True)
class FieldInWords:
    label: str
    before: str
    after: str


def field_in_words(path: str, before: str, after: str) -> FieldInWords:
    """``path`` (".spec.stopPolicy") with its values before and after, in words."""
    for rule in _RULES:
        match = rule.pattern.fullmatch(path)
        if match is None:
            continue
        groups = {
            key: str(int(value) + 1) if value.isdigit() else value
            for key, value in match.groupdict().items()
        }
        return FieldInWords(
            rule.words.format(**groups),
            rule.values.get(before, before),
            rule.values.get(after, after),
        )
    last = _INDEX.sub("", path.rsplit(".", 1)[-1]) or path
    return FieldInWords(_CAMEL.sub(" ", last).capitalize(), before, after)
