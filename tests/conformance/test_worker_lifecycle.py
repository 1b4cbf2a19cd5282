"""When a worker starts, and when it is replaced: under a lower address-space limit than the
runner asks for, with an engine whose objects raise when looked into, after a case that left
engine state behind, and after every case when asked to."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.casefile.case import Case
from conformance.run.workers import EngineWorkers, address_space_cap

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SOURCES = [{"doc": "doc", "quote": "A tensor created by the user is a leaf."}]


def case(name: str, run: str, expect: dict) -> Case:
    return Case.from_dict({"id": f"topic.{name}", "rule": "A rule.", "sources": SOURCES,
                           "steps": [{"run": run, "expect": expect}]})


def pid_case(name: str) -> Case:
    """A case whose failure shows the worker's process id (`torch.pid` is never -1)."""
    return case(name, "x = torch.ones(2)", {"torch.pid": -1})


def pids(engine: EngineWorkers, count: int) -> list[int]:
    results = [engine.run(pid_case(f"pid{i}")) for i in range(count)]
    assert {r.verdict for r in results} == {"failed"}, [r.message for r in results]
    return [int(r.actual) for r in results]


GIB = 2**30


def test_workers_start_under_a_lower_hard_address_space_limit() -> None:
    script = textwrap.dedent("""
        import resource
        from conformance.casefile.case import Case
        from conformance.run.workers import EngineWorkers

        case = Case.from_dict({"id": "topic.leaf", "rule": "A rule.",
                               "sources": [{"doc": "doc", "quote": "q"}],
                               "steps": [{"run": "x = torch.ones(2)",
                                          "expect": {"x.is_leaf": True}}]})
        if __name__ == "__main__":
            with EngineWorkers("refimpl", memory_mb=4096) as engine:
                print(engine.memory_bytes, engine.run(case).verdict)
        """)

    def lower_the_limit() -> None:  # a container started under `ulimit -v 3GiB`
        resource.setrlimit(resource.RLIMIT_AS, (3 * GIB, 3 * GIB))

    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=180, preexec_fn=lower_the_limit)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(3 * GIB), "passed"]


def test_the_cap_is_never_above_the_hard_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    requested = 4096 * 2**20
    expected = requested if hard == resource.RLIM_INFINITY else min(requested, hard)
    assert address_space_cap(requested) == expected


def test_an_engine_whose_objects_raise_when_looked_into_still_loads() -> None:
    with EngineWorkers("faulty_workers:raising_facade", settable=["grad"]) as engine:
        result = engine.run(case("leaf", "x = torch.ones(2, requires_grad=True)",
                                 {"x.is_leaf": True}))
    assert result.verdict == "passed", result.message


LEAF = """
- id: topic.leaf
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
    - run: x = torch.ones(2, requires_grad=True)
      expect:
        x.is_leaf: true
"""


def test_the_cli_runs_an_engine_whose_objects_raise_when_looked_into(tmp_path: Path) -> None:
    (tmp_path / "topic.yaml").write_text(LEAF)
    done = subprocess.run([sys.executable, "-m", "conformance", "run", "--engine",
                           "faulty_workers:raising_facade", "--cases",
                           str(tmp_path / "topic.yaml"), "--spec",
                           str(HERE / "data" / "spec"), "-q"], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(HERE)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("factory", ["leaves_state", "cannot_tell_its_state"])
def test_a_case_that_leaves_engine_state_behind_gets_the_next_case_a_fresh_worker(
        factory: str) -> None:
    with EngineWorkers(f"faulty_workers:{factory}") as engine:
        seen = pids(engine, 3)
        # Each worker says its first case left state behind: no two cases share a worker.
        assert len(set(seen)) == 3, seen
        replaced = dict(engine.replaced_after)
    reason = "grad mode is off" if factory == "leaves_state" else "state_leak() raised"
    assert set(replaced) == {"topic.pid0", "topic.pid1", "topic.pid2"}
    assert all(reason in why for why in replaced.values()), replaced


def test_a_clean_engine_keeps_its_worker() -> None:
    with EngineWorkers("faulty_workers:pid") as engine:
        seen = pids(engine, 3)
        assert len(set(seen)) == 1, seen
        assert engine.replaced_after == {}


def test_every_case_can_have_a_fresh_worker() -> None:
    with EngineWorkers("faulty_workers:pid", fresh_worker_per_case=True) as engine:
        seen = pids(engine, 3)
    assert len(set(seen)) == 3, seen
