"""quotas.kube.cel: CEL evaluated by cel-python with Kubernetes' library, and the CRD rule
engine's semantics (where rules run, what oldSelf is, how failures read)."""

from __future__ import annotations

from typing import Any

import pytest

from quotas.kube.cel import (
    RULE_MEMO,
    CelError,
    RuleMemo,
    check_schema_rules,
    compile_check,
    evaluate,
)

# --------------------------------------------------------------------------- evaluate


@pytest.mark.parametrize(
    ("expression", "variables", "expected"),
    [
        # cel-python's standard definitions, as a ValidatingAdmissionPolicy on Pods uses them.
        ("size(object.spec.containers)", {"object": {"spec": {"containers": [{}, {}]}}}, 2),
        ("object.metadata.name.size()", {"object": {"metadata": {"name": "trainer"}}}, 7),
        ("self.startsWith('team-')", {"self": "team-a"}, True),
        ("self.endsWith('-batch')", {"self": "team-a"}, False),
        ("self.contains('gpu')", {"self": "nvidia.com/gpu"}, True),
        ("self.matches('^[a-z]+-[0-9]+$')", {"self": "node-12"}, True),
        ("self.exists(c, c.image.startsWith('evil/'))", {"self": [{"image": "ok/x"}]}, False),
        ("self.all(c, has(c.resources))", {"self": [{"resources": {}}, {}]}, False),
        ("self.filter(n, n > 1)", {"self": [1, 2, 3]}, [2, 3]),
        ("self.map(c, c.name)", {"self": [{"name": "a"}, {"name": "b"}]}, ["a", "b"]),
        ("'gpu' in self", {"self": {"gpu": 1}}, True),
        ("2 in self", {"self": [1, 2]}, True),
        ("has(self.limits)", {"self": {"requests": {}}}, False),
        # Heterogeneous equality and cross-type numeric comparison, as in Kubernetes' CEL.
        ("self == 1.0", {"self": 1}, True),
        ("self < 1.5", {"self": 1}, True),
        ("self == 1", {"self": "1"}, False),
        ("self != 'a'", {"self": 1}, True),
        ("self in [1.0, 2.0]", {"self": 2}, True),
        # A concatenated string is a string like any other (a message or a key built with +).
        ("'a' + 'b' == 'ab'", {}, True),
        ("self + '-training' == 'team-a-training'", {"self": "team-a"}, True),
        ("'ab' != 'a' + 'b'", {}, False),
        ("[self + 'x'] == ['ax']", {"self": "a"}, True),
        # The Kubernetes string library.
        ("self.lowerAscii()", {"self": "GPU-Ä"}, "gpu-Ä"),
        ("self.upperAscii()", {"self": "gpu"}, "GPU"),
        ("self.trim()", {"self": "  a b  "}, "a b"),
        ("self.replace('-', '.')", {"self": "a-b-c"}, "a.b.c"),
        ("self.replace('-', '.', 1)", {"self": "a-b-c"}, "a.b-c"),
        ("self.split('/')", {"self": "nvidia.com/gpu"}, ["nvidia.com", "gpu"]),
        ("self.split('-', 2)", {"self": "a-b-c"}, ["a", "b-c"]),
        ("self.join(',')", {"self": ["a", "b"]}, "a,b"),
        ("self.join()", {"self": ["a", "b"]}, "ab"),
        ("self.indexOf('/')", {"self": "nvidia.com/gpu"}, 10),
        ("self.lastIndexOf('a')", {"self": "banana"}, 5),
        ("self.substring(0, 6)", {"self": "nvidia.com/gpu"}, "nvidia"),
        ("self.substring(11)", {"self": "nvidia.com/gpu"}, "gpu"),
        ("self.charAt(1)", {"self": "abc"}, "b"),
        # The Kubernetes list library.
        ("self.isSorted()", {"self": [1, 2, 2, 3]}, True),
        ("self.isSorted()", {"self": ["b", "a"]}, False),
        ("self.sum()", {"self": [1, 2, 3]}, 6),
        ("self.sum()", {"self": []}, 0),
        ("self.min()", {"self": [3, 1, 2]}, 1),
        ("self.max()", {"self": ["a", "c", "b"]}, "c"),
        ("self.indexOf(2)", {"self": [1, 2, 2]}, 1),
        ("self.lastIndexOf(2)", {"self": [1, 2, 2]}, 2),
        # Results come back as plain Python.
        ("{'a': [1, 2.5, null, true, 'x']}", {}, {"a": [1, 2.5, None, True, "x"]}),
    ],
)
def test_evaluate(expression: str, variables: dict[str, Any], expected: Any) -> None:
    result = evaluate(expression, variables)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("expression", "variables", "words"),
    [
        ("self.effect == 'NoSchedule'", {"self": {"key": "gpu"}}, "no such key: effect"),
        ("1 / self", {"self": 0}, "divide by zero"),
        ("self.substring(5)", {"self": "abc"}, "out of range"),
        ("self.min()", {"self": []}, "empty"),
        ("size(self)", {"self": 3}, "no such overload"),
        ("self.startsWith(1)", {"self": "a"}, "no such overload"),
    ],
)
def test_runtime_errors_raise_cel_error_naming_the_expression(
    expression: str, variables: dict[str, Any], words: str
) -> None:
    with pytest.raises(CelError) as caught:
        evaluate(expression, variables)
    assert words in str(caught.value)
    assert expression in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("self.size() >", "syntax error"),
        ("isURL(self)", "undeclared reference to 'isURL'"),  # the url library: not provided
        ("noSuchFunction(self)", "undeclared reference to 'noSuchFunction'"),
    ],
)
def test_compile_errors(expression: str, words: str) -> None:
    with pytest.raises(CelError) as caught:
        compile_check(expression)
    assert words in str(caught.value)
    assert repr(expression) in str(caught.value)


def test_values_that_json_cannot_hold_are_refused() -> None:
    with pytest.raises(CelError, match="JSON-like"):
        evaluate("self", {"self": object()})
    with pytest.raises(CelError, match="64 bits"):
        evaluate("self", {"self": 2**64})


# --------------------------------------------------------------------------- the rule engine


def _schema(**spec_properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": spec_properties}},
    }


def _messages(schema: dict[str, Any], obj: Any, old: Any = None, **options: Any) -> list[str]:
    return [str(v) for v in check_schema_rules(schema, obj, old, **options)]


def test_a_rule_runs_on_each_list_item_and_map_value_with_its_path() -> None:
    item_rule = {"rule": "self.count >= 0", "message": "count must not be negative"}
    value_rule = {"rule": "self.size() <= 3", "message": "too long"}
    schema = _schema(
        items={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"count": {"type": "integer"}},
                "x-kubernetes-validations": [item_rule],
            },
        },
        labels={
            "type": "object",
            "additionalProperties": {"type": "string", "x-kubernetes-validations": [value_rule]},
        },
    )
    obj = {"spec": {"items": [{"count": 1}, {"count": -1}], "labels": {"a": "ok", "b": "long"}}}
    assert _messages(schema, obj) == [
        'spec.items[1]: Invalid value: "object": count must not be negative',
        'spec.labels[b]: Invalid value: "long": too long',
    ]


def test_a_rule_does_not_run_on_an_absent_or_null_value() -> None:
    schema = _schema(
        name={"type": "string", "nullable": True, "x-kubernetes-validations": [{"rule": "false"}]}
    )
    assert _messages(schema, {"spec": {}}) == []
    assert _messages(schema, {"spec": {"name": None}}) == []
    assert _messages(schema, {"spec": {"name": "x"}}) == [
        'spec.name: Invalid value: "x": failed rule: false'
    ]


def test_messages_reasons_field_paths_and_message_expressions() -> None:
    rules = [
        {"rule": "self.a > 0", "messageExpression": "'a is ' + string(self.a)"},
        {"rule": "self.a > 1", "reason": "FieldValueForbidden", "message": "a must be > 1"},
        {"rule": "self.a > 2", "reason": "FieldValueRequired", "fieldPath": ".a", "message": "x"},
        {"rule": "self.a > 3", "messageExpression": "self.nope", "message": "fallback"},
    ]
    schema = _schema(
        box={
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "x-kubernetes-validations": rules,
        }
    )
    assert _messages(schema, {"spec": {"box": {"a": 0}}}) == [
        'spec.box: Invalid value: "object": a is 0',
        "spec.box: Forbidden: a must be > 1",
        "spec.box.a: Required value: x",
        'spec.box: Invalid value: "object": fallback',  # the expression failed: the message
    ]


def test_a_rule_that_errors_or_does_not_compile_is_a_violation_not_a_crash() -> None:
    schema = _schema(
        box={
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.missing == 1", "message": "needs missing"},
                {"rule": "self.size( >"},
            ],
        }
    )
    assert _messages(schema, {"spec": {"box": {}}}) == [
        'spec.box: Invalid value: "object": no such key: missing evaluating rule: needs missing',
        'spec.box: Invalid value: "object": rule compile error: syntax error: ' + "self.size( > ^",
    ]


def test_schema_defaults_apply_before_rules_run() -> None:
    rule = {"rule": "self.mode == 'Never'", "message": "mode must be Never"}
    schema = _schema(
        policy={
            "type": "object",
            "default": {},
            "properties": {"mode": {"type": "string", "default": "Never"}},
            "x-kubernetes-validations": [rule],
        }
    )
    assert _messages(schema, {"spec": {}}) == []
    assert _messages(schema, {"spec": {"policy": {"mode": "Always"}}}) == [
        'spec.policy: Invalid value: "object": mode must be Never'
    ]


def test_number_fields_are_doubles_and_set_lists_compare_in_any_order() -> None:
    schema = _schema(
        weight={"type": "number", "x-kubernetes-validations": [{"rule": "self == 1.0"}]},
        tags={
            "type": "array",
            "items": {"type": "string"},
            "x-kubernetes-list-type": "set",
            "x-kubernetes-validations": [{"rule": "self == ['a', 'b']"}],
        },
    )
    assert _messages(schema, {"spec": {"weight": 1, "tags": ["b", "a"]}}) == []


IMMUTABLE = {"rule": "self == oldSelf", "message": "immutable"}


def test_transition_rules_run_only_on_an_update_with_an_old_value() -> None:
    schema = _schema(queue={"type": "string", "x-kubernetes-validations": [IMMUTABLE]})
    new = {"spec": {"queue": "b"}}
    assert _messages(schema, new) == []  # a create
    assert _messages(schema, new, {"spec": {}}) == []  # the field is new
    assert _messages(schema, new, {"spec": {"queue": "a"}}) == [
        'spec.queue: Invalid value: "b": immutable'
    ]
    assert _messages(schema, new, {"spec": {"queue": "b"}}) == []


def _list_schema(list_type: str) -> dict[str, Any]:
    return _schema(
        items={
            "type": "array",
            "x-kubernetes-list-type": list_type,
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                "x-kubernetes-validations": [IMMUTABLE],
            },
        }
    )


def test_map_list_items_are_correlated_by_key_and_atomic_list_items_not_at_all() -> None:
    old = {"spec": {"items": [{"name": "a", "size": 1}, {"name": "b", "size": 2}]}}
    new = {"spec": {"items": [{"name": "b", "size": 3}, {"name": "a", "size": 1}]}}
    # Reordered, and item "b" changed: found at its new index through its key.
    assert _messages(_list_schema("map"), new, old) == [
        'spec.items[0]: Invalid value: "object": immutable'
    ]
    # An atomic list's items have no old value: the transition rule does not run.
    assert _messages(_list_schema("atomic"), new, old) == []


def test_map_values_are_correlated_unless_the_map_is_atomic() -> None:
    def schema(map_type: str | None) -> dict[str, Any]:
        labels: dict[str, Any] = {
            "type": "object",
            "additionalProperties": {"type": "string", "x-kubernetes-validations": [IMMUTABLE]},
        }
        if map_type:
            labels["x-kubernetes-map-type"] = map_type
        return _schema(labels=labels)

    old, new = {"spec": {"labels": {"zone": "a"}}}, {"spec": {"labels": {"zone": "b"}}}
    assert _messages(schema(None), new, old) == ['spec.labels[zone]: Invalid value: "b": immutable']
    assert _messages(schema("atomic"), new, old) == []


def test_optional_old_self_runs_on_create_too() -> None:
    rule = {
        "rule": "!oldSelf.hasValue() || self >= oldSelf.value()",
        "optionalOldSelf": True,
        "message": "may only grow",
    }
    orvalue = {"rule": "self >= oldSelf.orValue(5)", "optionalOldSelf": True, "message": ">= 5"}
    schema = _schema(size={"type": "integer", "x-kubernetes-validations": [rule, orvalue]})
    assert _messages(schema, {"spec": {"size": 3}}) == ["spec.size: Invalid value: 3: >= 5"]
    assert _messages(schema, {"spec": {"size": 3}}, {"spec": {"size": 2}}) == []
    assert "spec.size: Invalid value: 3: may only grow" in _messages(
        schema, {"spec": {"size": 3}}, {"spec": {"size": 4}}
    )


def test_an_update_ratchets_failures_on_unchanged_values_and_transition_only_skips_others() -> None:
    rule = {"rule": "self.size() <= 2", "message": "at most 2 characters"}
    schema = _schema(
        a={"type": "string", "x-kubernetes-validations": [rule]},
        b={"type": "string", "x-kubernetes-validations": [rule, IMMUTABLE]},
    )
    old = {"spec": {"a": "long", "b": "x"}}
    new = {"spec": {"a": "long", "b": "long"}}
    assert _messages(schema, new) == [
        'spec.a: Invalid value: "long": at most 2 characters',
        'spec.b: Invalid value: "long": at most 2 characters',
    ]
    # spec.a was already too long and did not change: the API server lets it be.
    assert _messages(schema, new, old) == [
        'spec.b: Invalid value: "long": at most 2 characters',
        'spec.b: Invalid value: "long": immutable',
    ]
    assert _messages(schema, new, old, transition_only=True) == [
        'spec.b: Invalid value: "long": immutable'
    ]


# --------------------------------------------------------------------------- remembered outcomes


def test_an_equal_value_is_answered_from_the_memo_with_the_same_violations() -> None:
    rules = [
        {"rule": "self.a > 0", "messageExpression": "'a is ' + string(self.a)"},
        {"rule": "self.missing == 1", "message": "needs missing"},
    ]
    schema = _schema(
        box={
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "x-kubernetes-validations": rules,
        },
        items={"type": "array", "items": {"type": "object", "x-kubernetes-validations": rules}},
    )
    obj = {"spec": {"box": {"a": 0}, "items": [{"a": 0}, {"a": 0}]}}
    RULE_MEMO.clear()
    first = _messages(schema, obj)
    # box and item 0 are evaluated (two schema nodes); item 1 equals item 0: remembered.
    assert (RULE_MEMO.hits, RULE_MEMO.misses) == (2, 4)
    assert _messages(schema, obj) == first
    assert RULE_MEMO.hits == 8
    assert first[:2] == [
        'spec.box: Invalid value: "object": a is 0',
        'spec.box: Invalid value: "object": no such key: missing evaluating rule: needs missing',
    ]
    assert first[2] == 'spec.items[0]: Invalid value: "object": a is 0'


def test_values_equal_in_json_only_are_not_confused() -> None:
    # 1, 1.0 and true are different CEL values; a rule sees each as it is.
    schema = _schema(box={"type": "object", "x-kubernetes-validations": [{"rule": "self.a == 1"}]})
    RULE_MEMO.clear()
    assert _messages(schema, {"spec": {"box": {"a": 1}}}) == []
    assert _messages(schema, {"spec": {"box": {"a": True}}}) == [
        'spec.box: Invalid value: "object": failed rule: self.a == 1'
    ]
    assert _messages(schema, {"spec": {"box": {"a": "1"}}}) != []
    assert RULE_MEMO.hits == 0


def test_a_transition_rule_is_remembered_with_its_old_value_and_ratcheting_still_applies() -> None:
    schema = _schema(queue={"type": "string", "x-kubernetes-validations": [IMMUTABLE]})
    RULE_MEMO.clear()
    new = {"spec": {"queue": "b"}}
    for _ in range(2):
        assert _messages(schema, new, {"spec": {"queue": "a"}}) == [
            'spec.queue: Invalid value: "b": immutable'
        ]
        assert _messages(schema, new, {"spec": {"queue": "b"}}) == []
    assert RULE_MEMO.hits == 2
    # A failing plain rule is remembered as failing, and dropped on an unchanged update.
    plain = _schema(name={"type": "string", "x-kubernetes-validations": [{"rule": "false"}]})
    assert _messages(plain, {"spec": {"name": "x"}}) == [
        'spec.name: Invalid value: "x": failed rule: false'
    ]
    assert _messages(plain, {"spec": {"name": "x"}}, {"spec": {"name": "x"}}) == []


def test_the_memo_is_bounded_and_keyed_on_the_schema_node_it_holds() -> None:
    memo = RuleMemo(size=3)
    node, other = {"type": "object"}, {"type": "object"}
    for index in range(5):
        memo.put(("rule", id(node), str(index), ""), node, (None, None))
    assert len(memo) == 3
    assert memo.get(("rule", id(node), "0", ""), node) is None  # the oldest went first
    assert memo.get(("rule", id(node), "4", ""), node) == (None, None)
    assert memo.get(("rule", id(node), "4", ""), other) is None  # another node: not its answer


def test_a_value_cel_cannot_hold_is_a_refusal_naming_the_field_not_a_crash() -> None:
    """An integer past 64 bits (JSON allows it; the API server's int64 does not) in a field a
    rule checks, new or old: the stand-in answered such an object with a 500."""
    rule = {"rule": "self >= 0", "message": "must not be negative"}
    schema = _schema(count={"type": "integer", "x-kubernetes-validations": [rule]})
    (message,) = _messages(schema, {"spec": {"count": 2**64}})
    assert message.startswith("spec.count: Invalid value: ")
    assert "does not fit a CEL int (64 bits)" in message
    transition = {"rule": "self >= oldSelf", "message": "must not shrink"}
    schema = _schema(count={"type": "integer", "x-kubernetes-validations": [transition]})
    (message,) = _messages(schema, {"spec": {"count": 1}}, {"spec": {"count": -(2**70)}})
    assert "does not fit a CEL int (64 bits)" in message
