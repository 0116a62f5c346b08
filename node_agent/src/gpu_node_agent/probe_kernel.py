"""The isolation probe's GPU work, run as a child process of the agent (as a script: it imports
nothing from ``gpu_agent``), with ``CUDA_VISIBLE_DEVICES`` naming one MIG instance or GPU.

``--role target``: square matrix products, timed; prints one JSON line
``{"seconds": t, "iterations": n, "library": "cupy"}``. Without ``--iterations`` it calibrates
to about ``--seconds`` of work first (the together run then repeats the same count).
``--role neighbour``: the same products in a loop; prints ``ready`` once warm and runs until
killed or ``--seconds`` pass (a neighbour never outlives a crashed agent for long).

Uses CuPy or PyTorch, whichever imports (``--library`` picks one); exit 3 when neither does.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

NO_LIBRARY = 3


def _cupy(size: int) -> tuple[Callable[[], None], Callable[[], None]]:
    import cupy

    a = cupy.random.random((size, size), dtype=cupy.float32)
    b = cupy.random.random((size, size), dtype=cupy.float32)
    out = cupy.empty_like(a)

    def step() -> None:
        cupy.matmul(a, b, out=out)

    return step, cupy.cuda.Device().synchronize


def _torch(size: int) -> tuple[Callable[[], None], Callable[[], None]]:
    import torch

    a = torch.rand((size, size), device="cuda", dtype=torch.float32)
    b = torch.rand((size, size), device="cuda", dtype=torch.float32)
    out = torch.empty_like(a)

    def step() -> None:
        torch.matmul(a, b, out=out)

    return step, torch.cuda.synchronize


LIBRARIES = {"cupy": _cupy, "torch": _torch}


def _load(library: str, size: int) -> tuple[str, Callable[[], None], Callable[[], None]]:
    names = [library] if library != "auto" else list(LIBRARIES)
    for name in names:
        try:
            step, sync = LIBRARIES[name](size)
        except ImportError:
            continue
        return name, step, sync
    print("neither CuPy nor PyTorch can be imported", file=sys.stderr)
    sys.exit(NO_LIBRARY)


def _timed(step: Callable[[], None], sync: Callable[[], None], iterations: int) -> float:
    sync()
    began = time.perf_counter()
    for _ in range(iterations):
        step()
    sync()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=("target", "neighbour"), required=True)
    parser.add_argument("--library", default="auto", choices=("auto", *LIBRARIES))
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--iterations", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    name, step, sync = _load(args.library, args.size)
    _timed(step, sync, 3)  # warm up: kernels loaded, clocks up
    if args.role == "neighbour":
        print("ready", flush=True)
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            _timed(step, sync, 10)
        return 0
    iterations = args.iterations
    if iterations <= 0:
        one = max(_timed(step, sync, 5) / 5, 1e-6)
        iterations = max(5, int(args.seconds / one))
    seconds = _timed(step, sync, iterations)
    print(json.dumps({"seconds": seconds, "iterations": iterations, "library": name}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
