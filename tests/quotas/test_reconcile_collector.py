"""A cluster's full pass runs with Python's cyclic garbage collector paused (core/memory.py):
at 10,000 tenants the collector's traversals of the pass's own objects were a third of its CPU.
The collector must come back on however the pass ends."""

from __future__ import annotations

import gc

import pytest

from core.memory import collector_paused
from quotas import sync
from quotas.kube.applier import ApplyError

pytestmark = pytest.mark.django_db


@pytest.fixture
def collector_on():
    """Tests that switch the collector leave it as they found it (on, as Python starts)."""
    assert gc.isenabled()
    yield
    gc.enable()


def test_the_collector_is_off_inside_and_on_after_even_on_error(collector_on):
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the pass failed")
    assert gc.isenabled()


def test_a_pass_inside_a_paused_one_leaves_it_paused(collector_on):
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the outer pass still holds it
    assert gc.isenabled()


def test_a_caller_that_turned_the_collector_off_keeps_it_off(collector_on):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_the_reconcile_compiles_validates_and_compares_with_the_collector_paused(
    world, standin, monkeypatch, collector_on
):
    seen: dict[str, bool] = {}
    real_validate, real_apply = sync.validate_objects, sync._apply_gated

    def validate(*args, **kwargs):
        seen["validate"] = gc.isenabled()
        return real_validate(*args, **kwargs)

    def apply(*args, **kwargs):
        seen["apply"] = gc.isenabled()
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(sync, "validate_objects", validate)
    monkeypatch.setattr(sync, "_apply_gated", apply)
    outcome = sync.cluster_reconcile(cluster=world.a100)
    assert outcome.ok, outcome.error
    assert outcome.result is not None and outcome.result.created  # it did the first sync
    assert seen == {"validate": False, "apply": False}
    assert gc.isenabled()


@pytest.mark.parametrize("failure", [ApplyError("the API server refused"), KeyError("bug")])
def test_the_collector_comes_back_after_a_failed_reconcile(
    world, standin, monkeypatch, collector_on, failure
):
    def fail(*_args, **_kwargs):
        raise failure

    monkeypatch.setattr(sync, "_apply_gated", fail)
    if isinstance(failure, ApplyError):
        assert sync.cluster_reconcile(cluster=world.a100).error
    else:
        with pytest.raises(KeyError):
            sync.cluster_reconcile(cluster=world.a100)
    assert gc.isenabled()
