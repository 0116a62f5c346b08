"""Python's cyclic garbage collector, paused for passes that build large acyclic data.

A cluster's reconcile holds every compiled object and every object LISTed back (208,000 of each
at 10,000 tenants: millions of dicts and lists). The collector traverses all of them on each
full collection it starts while they grow; at 10,000 tenants that was a third of the pass's CPU
(24 of 71 s in the scale bench), against a fifth at 1,000 tenants, which made the pass's cost
per object grow with the cluster. The data holds no reference cycles: reference counting frees
it when the pass returns, so nothing is lost by pausing the collector meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside; the collector as it was afterwards, whatever happens
    inside. The switch is the process's: a pass in a threaded server pauses the other threads'
    collection too, which only delays freeing their cycles (reference counting goes on)."""
    if not gc.isenabled():  # paused already (an outer pass, another thread's, or the caller)
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
