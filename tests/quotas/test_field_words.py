"""Field paths of the console's drift repairs in words (quotas.field_words)."""

from __future__ import annotations

import pytest

from quotas.field_words import field_in_words


@pytest.mark.parametrize(
    ("path", "before", "after", "said"),
    [
        (".spec.stopPolicy", "Hold", "None", ("New work", "held", "accepted")),
        (".spec.active", "false", "true", ("Workload", "paused", "running")),
        (".spec.hard.pods", "40", "20", ("Limit of pods", "40", "20")),
        (
            ".spec.resourceGroups[0].flavors[1].resources[0].nominalQuota", "4", "6",
            ("Guarantee (flavor 2, resource 1)", "4", "6"),
        ),
        (".metadata.labels.team", "x", "y", ("Label team", "x", "y")),
        (".spec.someNewField", "a", "b", ("Some new field", "a", "b")),
    ],
)  # fmt: skip
def test_a_path_reads_in_words(path, before, after, said):
    words = field_in_words(path, before, after)
    assert (words.label, words.before, words.after) == said
