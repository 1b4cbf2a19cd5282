"""`python -m conformance new-adapter NAME`: a working adapter skeleton for a new engine.

It writes three files into `--out` (default: the current folder), refusing to overwrite any:

- `NAME_adapter.py`: the adapter. With `--module MODULE` (an engine whose API is PyTorch's) it
  is a `TorchLikeEngine` over that module, with every hook spelled out; without, a translation
  layer to fill in, which runs at once and fails every case honestly until it is filled in;
- `NAME_expectations.yaml`: an empty expectations file;
- `test_NAME_conformance.py`: a pytest file that runs the suite on the engine and holds it to
  its expectations file (0 failed, 0 error, nothing stale).

Then: `python -m conformance run --engine NAME_adapter:make_engine --write-expectations
NAME_expectations.yaml` writes the first expectations file, grouped by cause.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from pathlib import Path

TORCH_LIKE = '''"""Conformance adapter for {name}, a module with PyTorch's API
(`import {module} as torch`).

Run: python -m conformance run --engine {name}_adapter:make_engine
Guide: docs/adapters.md of autograd-conformance (also the reference's "Writing an adapter").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.engines import Engine, TorchLikeEngine

EXPECTATIONS = Path(__file__).resolve().parent / "{name}_expectations.yaml"


class {cls}(TorchLikeEngine):
    """Every hook below has PyTorch's default; change the ones where {name} differs."""

    def node_name(self, node: Any) -> str:
        return type(node).__name__                       # e.g. MulBackward0

    def next_functions(self, node: Any) -> list[Any]:
        # PyTorch lists (node, input_nr) pairs; return the nodes, None for an input that needs
        # no gradient, in input order.
        return [function for function, _ in node.next_functions]


def make_engine() -> Engine:
    engine = {cls}("{name}", "{module}", lacks=frozenset({{"cuda"}}),
                   message_strictness="type", repro_import="import {module} as torch")
    engine.expectations = EXPECTATIONS
    return engine
'''

OTHER_API = '''"""Conformance adapter for {name}: the case language translated onto its API.

The runner gives each case a fresh namespace from `namespace()`: a `torch` object whose
factories build {name}'s tensors, wrapped so they answer PyTorch's attribute names
(`requires_grad`, `is_leaf`, `grad_fn`, `grad`, `backward`, ...). Until a name is translated, a
case that uses it fails with an AttributeError: the report says which names matter most.

Run: python -m conformance run --engine {name}_adapter:make_engine
Guide: docs/adapters.md of autograd-conformance (also the reference's "Writing an adapter").
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from conformance.engines import Engine

EXPECTATIONS = Path(__file__).resolve().parent / "{name}_expectations.yaml"


class Tensor:
    """{name}'s tensor as the cases see it. Wrap the engine's own tensor in `raw`."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw


class Torch:
    """`torch` as the cases see it: translate the factories and functions they use."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng          # draw every random value from it (rand, randn, parameters)

    def tensor(self, data: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        return Tensor(np.asarray(data, dtype=np.float32 if dtype is None else dtype))

    def rand(self, *size: int, requires_grad: bool = False) -> Tensor:
        return Tensor(self._rng.random(size, dtype=np.float64).astype(np.float32))


class {cls}(Engine):
    name = "{name}"
    version = "unknown"
    message_strictness = "type"          # exact | prefix | type
    # The features it really has (spec/features.yaml): a case needing one it lacks is
    # unsupported, not failed. How many of the suite's cases need each one:
{feature_help}
    features: frozenset[str] = frozenset({{"autograd_state"}})
    expectations = EXPECTATIONS

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        torch = Torch(rng)
        # nn and F as empty namespaces: a case using a module fails on the missing name.
        return {{"torch": torch, "nn": SimpleNamespace(), "F": SimpleNamespace()}}

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor.raw)

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, Tensor)


def make_engine() -> Engine:
    return {cls}()
'''

TEST = '''"""{name} against the autograd-conformance suite: every case passes, is unsupported, or is
listed with a reason in {name}_expectations.yaml (and nothing listed passes)."""

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_{ident}_meets_its_expectations(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "conformance", "run", "--engine", "{name}_adapter:make_engine",
         "--json", str(report), "-q"],
        cwd=HERE, capture_output=True, text=True, timeout=1800,
        env={{**__import__("os").environ, "PYTHONPATH": str(HERE)}})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    engine = json.loads(report.read_text())["engines"][0]
    assert engine["summary"]["failed"] == engine["summary"]["error"] == 0
    assert engine["stale_expectations"] == []
'''

EXPECTATIONS = '''# Cases {name} is known to fail, keyed by case id or id prefix, each with what
# {name} does instead (the adapter guide's "Known divergences"). Bootstrap it:
#     python -m conformance run --engine {name}_adapter:make_engine
#         --write-expectations {name}_expectations.yaml
xfail: {{}}
'''


def _feature_help() -> str:
    """Comment lines: each registered feature with the number of cases that need it, the most
    needed first (`autograd_state` is in nearly every case)."""
    from collections import Counter

    from conformance.casefile.loader import DEFAULT_SPEC_DIR, load

    loaded = load([DEFAULT_SPEC_DIR / "cases"])
    needed = Counter(feature for case in loaded.cases for feature in case.features)
    total = len(loaded.cases)
    ranked = sorted(needed.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(f"    #   {feature:<24} {count:>4} of {total}" for feature, count in ranked)


def add_parser(commands: argparse._SubParsersAction) -> None:
    sub = commands.add_parser("new-adapter", help="write a working adapter skeleton for NAME",
                              description=__doc__.split("\n\n")[0])
    sub.add_argument("name", help="the engine's name (lower case, e.g. mygrad)")
    sub.add_argument("--module", metavar="MODULE",
                     help="the engine's module, when it has PyTorch's API (a TorchLikeEngine)")
    sub.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                     help="folder for the three files (default: here)")


def run(args: argparse.Namespace) -> int:
    name = args.name
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or keyword.iskeyword(name):
        print(f"error: NAME {name!r}: use lower-case letters, digits and '_', starting with a "
              "letter", file=sys.stderr)
        return 2
    if args.module is not None and not re.fullmatch(r"[A-Za-z_][\w.]*", args.module):
        print(f"error: --module {args.module!r} is not a module name", file=sys.stderr)
        return 2
    cls = "".join(part.capitalize() for part in name.split("_")) + "Engine"
    fields = {"name": name, "cls": cls, "module": args.module, "ident": name,
              "feature_help": _feature_help()}
    files = {
        f"{name}_adapter.py": (TORCH_LIKE if args.module else OTHER_API).format(**fields),
        f"{name}_expectations.yaml": EXPECTATIONS.format(**fields),
        f"test_{name}_conformance.py": TEST.format(**fields),
    }
    out: Path = args.out
    existing = [str(out / file) for file in files if (out / file).exists()]
    if existing:
        print(f"error: would overwrite {', '.join(existing)}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for file, text in files.items():
        (out / file).write_text(text, encoding="utf-8")
    print("\n".join(str(out / file) for file in files))
    go = "" if out.resolve() == Path.cwd().resolve() else f"cd {out} && "
    print(f"next: {go}python -m conformance run --engine {name}_adapter:make_engine "
          f"--write-expectations {name}_expectations.yaml")
    return 0
