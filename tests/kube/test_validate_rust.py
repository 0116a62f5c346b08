"""quotas.kube.validate's two schema validators: jsonschema_rs decides first and the Python
``jsonschema`` one words the refusals. On many randomly broken objects of every kind the portal
writes, both must accept and refuse the same objects, and validate_object's messages must be
those of the Python validator alone."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from quotas.kube import compiler, validate
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from tests.kube.test_kueue_rules import BASES

SEED = 19
BROKEN_OBJECTS = 600
Path = tuple[str | int, ...]


def _tenant(slug: str, *, parent: str | None, split: bool) -> TenantSpec:
    d = Decimal
    return TenantSpec(
        slug=slug,
        generation=3,
        namespaces=(
            NamespaceSpec(f"{slug}-train", "training"),
            NamespaceSpec(f"{slug}-inf", "inference"),
        ),
        quotas=(
            QuotaSpec("a100-80gb", "nvidia.com/gpu", d(4), d(6)),
            QuotaSpec("a100-80gb", "cpu", d(32), d(48)),
            QuotaSpec("a100-80gb", "memory", d(256 * 1024**3), d(384 * 1024**3)),
            QuotaSpec("cpu-epyc", "cpu", d(16), d(32)),
        ),
        display_name=slug.title(),
        parent=parent,
        max_running_jobs=10,
        max_queued_jobs=50,
        max_pods=100,
        storage_bytes=d(1024**4),
        max_pvcs=10,
        split_by_priority=split,
        editors=(f"{slug}-lead",),
        viewers=(f"{slug}-viewer",),
    )


def _cluster(*, kueue: bool) -> ClusterSpec:
    d = Decimal
    return ClusterSpec(
        name="rust",
        flavors=(
            FlavorSpec(
                "a100-80gb",
                "gpu",
                {"nvidia.com/gpu": d(64), "cpu": d(512), "memory": d(4 * 1024**4)},
                gpu_model="NVIDIA A100-SXM4-80GB",
                node_labels={"accelerator": "a100"},
            ),
            FlavorSpec("cpu-epyc", "cpu", {"cpu": d(1024), "memory": d(8 * 1024**4)}),
        ),
        has_kueue=kueue,
        has_volcano=not kueue,
    )


def base_objects() -> list[dict[str, Any]]:
    """Valid objects of every kind the portal writes (Kueue and Volcano clusters), and the
    Kueue kinds of the CEL rule tests (Workload with status)."""
    tenants = [
        _tenant("team-a", parent=None, split=True),
        _tenant("team-b", parent="team-a", split=False),
    ]
    objects = [
        *compiler.compile_cluster(_cluster(kueue=True), tenants),
        *compiler.compile_cluster(_cluster(kueue=False), tenants),
        *(copy.deepcopy(obj) for obj in BASES.values()),
    ]
    unique = {(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
              for o in objects}  # fmt: skip
    return list(unique.values())


def _paths(value: Any, path: Path = ()) -> Iterator[Path]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _parent(obj: Any, path: Path) -> Any:
    for step in path[:-1]:
        obj = obj[step]
    return obj


WRONG_TYPES: list[Any] = ["text", 7, -3, 2.5, True, None, [], {}, ["a"], {"x": 1}]
OUT_OF_RANGE: list[Any] = [-1, -(2**31) - 1, 2**31, 2**63, 2**70, 1e30, -0.5, 1.5, 0]
BAD_STRINGS: list[Any] = ["", "12Q", "1.2.3", "-5", "Ki", "1e3", " 8", "UPPER", "a" * 300, "x/y/z"]


def break_object(obj: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], str]:
    """A copy of ``obj`` with one random fault: a wrong type, a missing field, a value out of
    range, a malformed string, an unknown field, or a repeated list item."""
    broken = copy.deepcopy(obj)
    paths = [p for p in _paths(broken) if p and p[0] not in ("apiVersion", "kind")]
    path = rng.choice(paths)
    parent, step = _parent(broken, path), path[-1]
    fault = rng.choice(["type", "missing", "range", "string", "unknown", "repeat", "enum"])
    if fault == "type":
        parent[step] = copy.deepcopy(rng.choice(WRONG_TYPES))
    elif fault == "missing":
        if isinstance(parent, dict):
            del parent[step]
        else:
            parent.pop(step)
    elif fault == "range":
        parent[step] = rng.choice(OUT_OF_RANGE)
    elif fault in ("string", "enum"):
        parent[step] = rng.choice(BAD_STRINGS) if fault == "string" else "NotAnOption"
    elif fault == "unknown":
        target = parent[step] if isinstance(parent[step], dict) else parent
        if isinstance(target, dict):
            target[rng.choice(["extra", "nominalquota", "cohort", "x-y"])] = 1
        else:
            target.append({"unexpected": True})
    else:  # repeat a list item, or the list holding this value
        if isinstance(parent, list):
            parent.append(copy.deepcopy(parent[int(step)]))
        else:
            parent[step] = [copy.deepcopy(parent[step])] * 2
    return broken, f"{fault} at {'.'.join(map(str, path))}"


def _validators(obj: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The (two-stage validator, instance) pairs validate_object runs on this object."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    assert isinstance(api_version, str) and isinstance(kind, str)
    group, version = validate._split_api_version(api_version)
    schema_version = validate.core_schema_version("1.33")
    if (group, kind) not in validate._crd_index():
        found = validate._core_validator(schema_version, api_version, kind)
        return [(found, obj)] if found is not None else []
    raw = validate.crd_versions()[(api_version, kind)]
    pruned = validate._drop_nulls(dict(obj), raw)
    pairs = [(validate._crd_validator(group, version, kind), pruned)]
    if isinstance(pruned.get("metadata"), dict):
        pairs.append((validate._object_meta_validator(schema_version), pruned["metadata"]))
    return pairs


def _python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        validate._TwoStageValidator,
        "iter_errors",
        lambda self, instance: iter(self.python.iter_errors(instance)),
    )


def _rust_accepts(validator: Any, instance: Any) -> bool | None:
    try:
        return bool(validator.rust.is_valid(instance))
    except ValueError:
        return None  # not JSON-like for Rust (never made here): the Python one decides


def test_the_valid_objects_pass_both_validators():
    objects = base_objects()
    kinds = {o["kind"] for o in objects}
    assert {"ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "Workload", "Queue",
            "ResourceQuota", "LimitRange", "Namespace", "RoleBinding", "NetworkPolicy"} <= kinds  # fmt: skip
    for obj in objects:
        assert validate.validate_object(obj) == [], obj["kind"]
        for validator, instance in _validators(obj):
            assert _rust_accepts(validator, instance) is True, obj["kind"]
            assert list(validator.python.iter_errors(instance)) == [], obj["kind"]


def test_randomly_broken_objects_get_the_same_answer_from_both_validators(monkeypatch):
    rng = random.Random(SEED)  # noqa: S311 - reproducible test data, not cryptography
    objects = base_objects()
    refused = 0
    two_stage: list[list[str]] = []
    cases = []
    for _ in range(BROKEN_OBJECTS):
        broken, fault = break_object(rng.choice(objects), rng)
        for validator, instance in _validators(broken):
            python_accepts = not list(validator.python.iter_errors(instance))
            assert _rust_accepts(validator, instance) == python_accepts, (
                f"{broken['kind']}: {fault}: jsonschema_rs and jsonschema disagree"
            )
            refused += not python_accepts
        cases.append((broken, fault))
        two_stage.append(validate.validate_object(broken))
    _python_only(monkeypatch)
    for (broken, fault), messages in zip(cases, two_stage, strict=True):
        assert messages == validate.validate_object(broken), f"{broken['kind']}: {fault}"
    # The faults are real: most broken objects fail the schema (the rest break a rule beyond
    # it, or change a value the schema allows).
    assert refused > BROKEN_OBJECTS // 2
