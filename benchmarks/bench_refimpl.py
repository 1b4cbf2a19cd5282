"""refimpl against PyTorch (CPU): speed and memory as ratios measured in one run.

    python benchmarks/bench_refimpl.py            # the targets of the refimpl issue
    python benchmarks/bench_refimpl.py --quick    # a smaller smoke run (a few seconds)
    python benchmarks/bench_refimpl.py --profile  # also cProfile refimpl's side of (a) and (b)

Rows (forward + backward each):

(a) a chain of scalar ops (``y = y * c`` and ``y = y + c`` alternating), 10,000 nodes:
    time refimpl / time torch, target <= 1.5;
(b) a 4-layer MLP (``nn.Linear(1024, 1024)`` + ``nn.ReLU``, float32) at batch 256, then
    ``sum().backward()``: target <= 1.0;
(c) the same chain with 1,000,000 nodes: it must complete (no RecursionError), and the peak
    memory it adds must be at most 0.8x PyTorch's.

Every measurement runs in its own fresh Python process that imports one engine only, so
neither engine's allocations or caches disturb the other. Times are the best of N repetitions
after one warm-up. Memory is the growth of the process's peak resident set
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) from just before the chain is built to the end
of its backward pass, measured after the imports and a small warm-up chain: it sees NumPy's
arrays, Python objects and PyTorch's C++ allocations alike, which ``tracemalloc`` would not.
The BLAS of both engines gets the same number of threads: ``OPENBLAS_NUM_THREADS``,
``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` are set before NumPy loads, and the torch process
calls ``torch.set_num_threads`` with the same number.

Both engines also get the same glibc malloc settings (``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_``, see ``mallopt(3)``): with glibc's defaults every large NumPy array
is a fresh ``mmap`` whose pages fault in on first touch - thousands of faults per MLP step,
about 10% of its time - while PyTorch's allocator reuses its memory and faults none.
``--default-malloc`` leaves glibc's defaults, to see that difference.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("refimpl", "torch")
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Large blocks stay in the heap when freed (64 MiB mmap threshold, 256 MiB trim threshold).
MALLOC_VARIABLES = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20),
                    "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


@dataclass(frozen=True)
class Sizes:
    chain: int
    mlp_width: int
    mlp_layers: int
    mlp_batch: int
    long_chain: int
    repeat: int


FULL = Sizes(chain=10_000, mlp_width=1024, mlp_layers=4, mlp_batch=256, long_chain=1_000_000,
             repeat=5)
QUICK = Sizes(chain=1_000, mlp_width=128, mlp_layers=4, mlp_batch=32, long_chain=20_000,
              repeat=2)


# ------------------------------------------------------------------ workloads (child side)

def _import_engine(name: str, threads: int) -> tuple[Any, Any]:
    import importlib

    torch = importlib.import_module(name)
    if name == "torch":
        torch.set_num_threads(threads)
    return torch, importlib.import_module(f"{name}.nn")


def _chain(torch: Any, nodes: int) -> Any:
    """Forward and backward through `nodes` scalar ops; returns the leaf."""
    x = torch.tensor(1.0, requires_grad=True)
    y = x
    for i in range(nodes):
        y = y * 0.9999 if i % 2 == 0 else y + 0.0001
    y.backward()
    return x


def _best_of(repeat: int, run: Any, between: Any = None) -> float:
    run()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        if between is not None:
            between()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _time_chain(torch: Any, nn: Any, sizes: Sizes) -> dict[str, Any]:
    return {"seconds": _best_of(sizes.repeat, lambda: _chain(torch, sizes.chain))}


def _time_mlp(torch: Any, nn: Any, sizes: Sizes) -> dict[str, Any]:
    import numpy as np

    layers = []
    for _ in range(sizes.mlp_layers):
        layers += [nn.Linear(sizes.mlp_width, sizes.mlp_width), nn.ReLU()]
    model = nn.Sequential(*layers)
    data = np.random.default_rng(0).random((sizes.mlp_batch, sizes.mlp_width), np.float32)
    x = torch.tensor(data)
    parameters = list(model.parameters())

    def step() -> None:
        model(x).sum().backward()

    def clear() -> None:
        # Every repetition does the same work: gradients start from None.
        for p in parameters:
            p.grad = None

    return {"seconds": _best_of(sizes.repeat, step, clear)}


class PeakMemory:
    """The growth of this process's peak resident set over a block of work.

    On Linux the kernel's high-water mark (``VmHWM``) is reset to the current RSS first
    (``/proc/self/clear_refs``), so memory freed before the block (import-time garbage) cannot
    hide the block's peak. Elsewhere ``getrusage``'s ``ru_maxrss`` (the peak since the process
    started) is used, which can only under-state the growth.
    """

    def __init__(self) -> None:
        self.method = "VmHWM after a reset" if self._resettable() else "ru_maxrss"
        self.baseline = self._peak()

    @staticmethod
    def _resettable() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")  # resets VmHWM to the current RSS
            return True
        except OSError:
            return False

    def _peak(self) -> int:
        if self.method == "ru_maxrss":
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    def growth(self) -> int:
        return self._peak() - self.baseline


def _memory_chain(torch: Any, nn: Any, sizes: Sizes) -> dict[str, Any]:
    _chain(torch, 1_000)  # load whatever the first backward loads before the baseline
    memory = PeakMemory()
    start = time.perf_counter()
    x = _chain(torch, sizes.long_chain)
    seconds = time.perf_counter() - start
    return {"bytes": memory.growth(), "method": memory.method, "seconds": seconds,
            "grad": float(x.grad.item())}


WORKLOADS = {"chain-time": _time_chain, "mlp-time": _time_mlp, "chain-memory": _memory_chain}


def child(task: str, engine: str, sizes: Sizes, threads: int) -> None:
    """Run one measurement and print it as one JSON line (the parent parses the last line)."""
    if task == "profile":
        profile(sizes, threads)
        return
    torch, nn = _import_engine(engine, threads)
    print(json.dumps(WORKLOADS[task](torch, nn, sizes)))


def profile(sizes: Sizes, threads: int) -> None:
    """cProfile refimpl's side of (a) and (b): where its time goes."""
    import cProfile
    import pstats

    torch, nn = _import_engine("refimpl", threads)
    for task in ("chain-time", "mlp-time"):
        profiler = cProfile.Profile()
        profiler.enable()
        WORKLOADS[task](torch, nn, sizes)
        profiler.disable()
        print(f"\n--- cProfile of refimpl, {task} (top 15 by own time)")
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(15)


# ------------------------------------------------------------------ orchestration (parent side)

def _spawn(task: str, engine: str, threads: int, quick: bool, malloc: bool = True
           ) -> subprocess.CompletedProcess:
    """Run this script as a child for one task, with the thread (and, where ``malloc``, the
    malloc) settings in its environment."""
    env = dict(os.environ)
    env.update({name: str(threads) for name in THREAD_VARIABLES})
    if malloc:
        env.update(MALLOC_VARIABLES)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, str(Path(__file__).resolve()), "--child", task, "--engine",
               engine, "--threads", str(threads)] + (["--quick"] if quick else [])
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)


def _measure(task: str, engine: str, threads: int, quick: bool, malloc: bool
             ) -> dict[str, Any]:
    done = _spawn(task, engine, threads, quick, malloc)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {done.returncode}: {tail[0]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _figure(result: dict[str, Any], key: str) -> str:
    if "error" in result:
        return "FAILED"
    value = result[key]
    if key == "bytes":
        return f"{value / 2**20:.1f} MiB"
    return f"{value * 1000:.1f} ms"


def _row(label: str, key: str, target: float, refimpl: dict[str, Any],
         torch: dict[str, Any]) -> tuple[list[str], bool]:
    failed = "error" in refimpl or "error" in torch
    ratio = None if failed else refimpl[key] / max(torch[key], 1e-12)
    verdict = "FAIL" if failed else ("PASS" if ratio <= target else "MISS")
    cells = [label, _figure(refimpl, key), _figure(torch, key),
             "-" if ratio is None else f"{ratio:.2f}", f"<= {target:g}", verdict]
    return cells, failed


def _machine(threads: int, malloc: bool) -> list[str]:
    import numpy as np

    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load} "
        "(1, 5, 15 min; other processes share the CPUs)",
        f"python {platform.python_version()}, numpy {np.__version__}, torch {torch_version}",
        f"threads: {threads} for both engines ({', '.join(THREAD_VARIABLES)} set before NumPy "
        f"loads; torch.set_num_threads({threads}))",
        "malloc: " + (", ".join(f"{k}={v}" for k, v in MALLOC_VARIABLES.items())
                      + " for both engines" if malloc else "glibc's defaults (--default-malloc)"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a smoke run")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS and intra-op threads for both engines (default 1: on a "
                        "shared machine, more threads than free cores make BLAS stall)")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc thresholds at their defaults")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile of refimpl's side of (a) and (b)")
    parser.add_argument("--child", choices=[*WORKLOADS, "profile"], help=argparse.SUPPRESS)
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.child:
        child(args.child, args.engine, sizes, args.threads)
        return 0

    print("refimpl vs PyTorch, forward + backward, "
          f"{'quick smoke run' if args.quick else 'full sizes'}")
    malloc = not args.default_malloc
    for line in _machine(args.threads, malloc):
        print(line)
    measured = {(task, engine): _measure(task, engine, args.threads, args.quick, malloc)
                for task in WORKLOADS for engine in ENGINES}
    rows = [
        (f"(a) chain of {sizes.chain:,} scalar ops: time", "chain-time", "seconds",
         1.5),
        (f"(b) MLP {sizes.mlp_layers}x{sizes.mlp_width}, batch {sizes.mlp_batch}, float32: "
         "time", "mlp-time", "seconds", 1.0),
        (f"(c) chain of {sizes.long_chain:,} nodes: peak memory", "chain-memory",
         "bytes", 0.8),
    ]
    table = [["benchmark", "refimpl", "torch", "ratio", "target", "result"]]
    any_failed = False
    for label, task, key, target in rows:
        cells, failed = _row(label, key, target, measured[(task, "refimpl")],
                             measured[(task, "torch")])
        table.append(cells)
        any_failed |= failed
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print()
    for row in table:
        print("  ".join(cell.ljust(width) if i == 0 else cell.rjust(width)
                        for i, (cell, width) in enumerate(zip(row, widths, strict=True))))
    print()
    print(f"times: best of {sizes.repeat} after a warm-up, each engine in a fresh process")
    for engine in ENGINES:
        result = measured[("chain-memory", engine)]
        if "error" in result:
            print(f"(c) {engine} did not complete: {result['error']}")
        else:
            print(f"(c) {engine}: built and backpropagated in {result['seconds']:.1f} s, "
                  f"x.grad = {result['grad']:.6g}")
    methods = {measured[("chain-memory", e)].get("method") for e in ENGINES} - {None}
    print(f"memory: growth of the peak RSS ({', '.join(sorted(methods)) or '-'}) from after "
          "imports and a warm-up to the end of backward, in a fresh process per engine")
    if args.profile:
        done = _spawn("profile", "refimpl", args.threads, args.quick)
        print(done.stdout + done.stderr)
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
