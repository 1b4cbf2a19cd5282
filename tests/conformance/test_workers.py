"""Engines run in worker processes: a faulty engine costs the case in flight one `error` that
says what happened, the next case runs on a fresh worker, and nothing an engine does reaches
the runner or another engine's verdicts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conformance.casefile.case import Case
from conformance.casefile.loader import SpecResources, load
from conformance.run import workers
from conformance.run.workers import EngineWorkers, WorkerStartError
from conformance.verdict.suite import run_suite

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
REPO = HERE.parents[1]
ENV = {**os.environ, "PYTHONPATH": str(HERE)}

CASE = """
- id: topic.{name}
  rule: A rule.
  sources:
    - doc: doc
      quote: A tensor created by the user is a leaf.
  steps:
    - run: {run}
      expect:
        {expect}
"""
BEFORE = ("before", "x = torch.ones(2, requires_grad=True)", "x.is_leaf: true")
TRIGGER = ("trigger", "x = torch.ones(13)", "x.is_leaf: true")
AFTER = ("after", "y = (torch.ones(2, requires_grad=True) * 3).sum()", "y.requires_grad: true")
WRONG = ("wrong", "x = torch.ones(2)", "value(x): {np: 'x * 0 + 5'}")


def cases(tmp_path: Path, *specs: tuple[str, str, str]) -> list:
    (tmp_path / "topic.yaml").write_text("".join(
        CASE.format(name=name, run=run, expect=expect) for name, run, expect in specs))
    resources = SpecResources.load(DATA / "spec")
    loaded = load([tmp_path / "topic.yaml"], resources)
    assert loaded.problems == []
    return loaded.cases


def verdicts(report, engine: str) -> dict[str, str]:
    return {r.case_id.split(".", 1)[1]: r.verdict for r in report.run_for(engine).results}


def messages(report, engine: str) -> dict[str, str]:
    return {r.case_id.split(".", 1)[1]: r.message for r in report.run_for(engine).results}


@pytest.mark.parametrize(("factory", "what", "frame"), [
    ("hangs", "did not answer within 6 s and was killed", "_hang_with_sigalrm_blocked"),
    ("swallows_timeout", "did not answer within 6 s and was killed", "_swallow_every_timeout"),
    ("exits", "the engine raised SystemExit: 3", None),
    ("hard_exits", "exited with status 4", None),
    ("segfaults", "was killed by SIGSEGV", "_segfault"),
], ids=["hang with SIGALRM blocked", "timeout swallowed", "sys.exit", "os._exit", "segfault"])
def test_a_dead_or_hung_worker_costs_one_case(tmp_path: Path, factory: str, what: str,
                                              frame: str | None) -> None:
    with EngineWorkers(f"faulty_workers:{factory}") as engine:
        report = run_suite(cases(tmp_path, BEFORE, TRIGGER, AFTER), [engine], timeout=1)
    name = report.runs[0].engine.name
    assert verdicts(report, name) == {"before": "passed", "trigger": "error", "after": "passed"}
    message = messages(report, name)["trigger"]
    assert what in message
    assert "a fresh worker runs the next case" in message
    if frame is not None:
        # The Python stack the worker was in when it hung or crashed, innermost first.
        stack = message.split("the worker's Python stack (most recent call first):\n", 1)[1]
        assert f" in {frame}\n" in stack, message
        assert len(stack.splitlines()) <= 41
    # The worker that ran it is gone; the fresh one wrote its repro script.
    script = report.run_for(name).repros["topic.trigger"]
    assert script.startswith(f"# Repro: case topic.trigger on engine {name} ")
    assert "x = torch.ones(13)" in script
    compile(script, "repro", "exec")


def test_a_worker_its_pool_cannot_stop_is_killed_by_the_runner(tmp_path: Path,
                                                                monkeypatch) -> None:
    # A worker that hangs holding its channel lock (as a Paddle worker deadlocked in malloc
    # did) is beyond pebble's timeout; without the runner's own watchdog the run waits forever.
    monkeypatch.setattr(workers, "WATCHDOG_S", 2.0)
    began = time.monotonic()
    with EngineWorkers("faulty_workers:hangs_holding_the_pool_lock") as engine:
        report = run_suite(cases(tmp_path, BEFORE, TRIGGER, AFTER), [engine], timeout=1)
    assert time.monotonic() - began < 60
    name = report.runs[0].engine.name
    assert verdicts(report, name) == {"before": "passed", "trigger": "error", "after": "passed"}
    message = messages(report, name)["trigger"]
    assert "hung past 8 s and its pool could not stop it; the runner killed it" in message
    assert " in _hang_with_sigalrm_blocked\n" in message


def test_a_leaking_engine_is_recycled_before_it_runs_out_of_memory(tmp_path: Path) -> None:
    many = [(f"leak{i}", "x = torch.ones(13)", "x.is_leaf: true") for i in range(8)]
    with EngineWorkers("faulty_workers:leaks", memory_mb=1024) as engine:
        report = run_suite(cases(tmp_path, *many, AFTER), [engine])
    assert set(verdicts(report, "leaks").values()) == {"passed"}, messages(report, "leaks")


@pytest.mark.parametrize("factory", ["patches_numpy", "changes_torch_defaults"])
def test_an_engine_cannot_change_another_engines_verdicts(tmp_path: Path, factory: str) -> None:
    pytest.importorskip("torch", reason="the honest engine here is PyTorch")
    with EngineWorkers(f"faulty_workers:{factory}") as faulty, EngineWorkers("torch") as honest:
        report = run_suite(cases(tmp_path, WRONG, AFTER), [faulty, honest])
    assert verdicts(report, "torch") == {"wrong": "failed", "after": "passed"}
    import numpy as np  # noqa: PLC0415 - the runner's own NumPy, untouched

    assert np.isclose(1.0, 2.0) == np.False_


def test_a_case_that_changes_the_engine_is_an_error_and_the_worker_is_replaced(
        tmp_path: Path) -> None:
    tamper = ("tamper", "t = torch.ones(1)\nk = type(t)\nk.grad = None", "t.is_leaf: true")
    reads_grad = ("reads", "x = torch.ones(2, requires_grad=True)\n(x * 2).sum().backward()",
                  "x.grad: [2.0, 2.0]")
    resources = SpecResources.load(DATA / "spec")
    text = "".join(CASE.format(name=n, run=r.replace("\n", "\n        "), expect=e)
                   for n, r, e in (tamper, reads_grad))
    (tmp_path / "topic.yaml").write_text(text.replace("run: t =", "run: |\n        t =")
                                         .replace("run: x =", "run: |\n        x ="))
    loaded = load([tmp_path / "topic.yaml"], resources)
    # Lint refuses the write through an alias of the engine's class; the worker must hold
    # without lint too, so the cases run as they were written.
    assert [p for p in loaded.problems if "'k' is bound to a module or class" in str(p)]
    cases = [Case.from_dict({"id": "topic.tamper", "rule": "A rule.",
                             "steps": [{"run": tamper[1], "expect": {"t.is_leaf": True}}]}),
             Case.from_dict({"id": "topic.reads", "rule": "A rule.",
                               "steps": [{"run": reads_grad[1],
                                          "expect": {"x.grad": [2.0, 2.0]}}]})]
    with EngineWorkers("refimpl", settable=["grad", "requires_grad"]) as engine:
        report = run_suite(cases, [engine])
    assert verdicts(report, "refimpl") == {"tamper": "error", "reads": "passed"}
    assert "Tensor.grad was rebound" in messages(report, "refimpl")["tamper"]


def test_an_engine_that_cannot_be_imported_fails_to_start() -> None:
    with pytest.raises(WorkerStartError, match="No module named 'no_such_engine_module'"):
        EngineWorkers("faulty_workers:cannot_import")


def cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=180, **kwargs)


def test_cli_exits_non_zero_with_the_import_error_in_one_line() -> None:
    done = cli("run", "--engine", "faulty_workers:cannot_import")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "No module named 'no_such_engine_module'" in done.stderr


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_cli_refuses_a_timeout_that_would_disable_the_watchdog(value: str) -> None:
    done = cli("run", "--engine", "refimpl", "--timeout", value)
    assert done.returncode == 2 and "must be a number of seconds above 0" in done.stderr


def test_cli_checks_report_paths_before_running(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = cli("run", "--engine", "refimpl", "--json", str(blocker / "r.json"))
    assert done.returncode == 2 and "cannot write the report" in done.stderr
    assert "TOTAL" not in done.stdout


def test_a_closed_pipe_does_not_lose_the_reports(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "conformance", "run", "--engine", "refimpl",
                             "--json", str(report)], cwd=REPO, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    proc.stdout.close()  # the reader of `run ... | head` went away
    proc.wait(timeout=180)
    data = json.loads(report.read_text())
    assert data["status"] == "complete" and len(data["results"]) > 300
    assert oct(report.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


@pytest.mark.parametrize(("sig", "delay"), [(signal.SIGINT, 2), (signal.SIGTERM, 2),
                                            (signal.SIGTERM, 0)],
                         ids=["SIGINT", "SIGTERM", "SIGTERM while loading"])
def test_an_interrupted_run_writes_a_partial_report(tmp_path: Path, sig: int,
                                                    delay: float) -> None:
    (tmp_path / "topic.yaml").write_text("".join(
        CASE.format(name=f"slow{i}", run="x = torch.ones(13)", expect="x.is_leaf: true")
        for i in range(3)))
    paths = {kind: tmp_path / f"r.{kind}" for kind in ("json", "xml", "md")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance", "run", "--engine", "faulty_workers:hangs",
         "--cases", str(tmp_path / "topic.yaml"), "--spec", str(DATA / "spec"),
         "--timeout", "30", "--json", str(paths["json"]), "--junit", str(paths["xml"]),
         "--markdown", str(paths["md"])], cwd=REPO, env={**ENV, "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_ctrl_c_as_in_a_terminal)
    deadline = time.monotonic() + 60
    while not paths["json"].exists() \
            or json.loads(paths["json"].read_text() or "{}").get("status") != "running":
        if proc.poll() is not None or time.monotonic() > deadline:
            _fail_with_output(proc, "the run ended or stalled before it wrote its placeholder")
        time.sleep(0.1)
    time.sleep(delay)  # 2 s: the first case is hanging in its worker; 0: engines loading
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        _fail_with_output(proc, "the run did not stop within 60 s of the signal")
    assert proc.returncode == 130, f"stdout:\n{out}\nstderr:\n{err}"
    data = json.loads(paths["json"].read_text())
    assert data["status"] == "interrupted"
    assert len(data["results"]) < 3
    assert 'status="interrupted"' in paths["xml"].read_text()
    assert "**Interrupted:**" in paths["md"].read_text()


def _ctrl_c_as_in_a_terminal() -> None:
    """In the runner's process before it starts: SIGINT handled by default and not blocked,
    as for a command typed in a terminal. A process inherits both: pytest started from a
    non-interactive shell's background job (`pytest &` in a script, some CI runners) has SIGINT
    ignored, so would the runner, and this test would then check its parent's signal state
    instead of the runner's handling of Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_state(pid: int) -> str:
    """The process's pending, blocked, ignored and caught signal masks (Linux)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "".join(line for line in status if line.startswith(("Sig", "ShdPnd")))
    except OSError:
        return "(no /proc status)\n"


def _fail_with_output(proc: subprocess.Popen, what: str) -> None:
    """Stop `proc` and fail with what it printed: a stuck run says where it was (SIGABRT
    makes its faulthandler print every thread's stack). `proc` leads its own process group:
    its workers and forkserver, which hold its output pipes too, are killed with it."""
    state = _signal_state(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGABRT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    out, err = proc.communicate(timeout=30)
    pytest.fail(f"{what} (exit status {proc.returncode})\nsignals of the run:\n{state}"
                f"stdout:\n{out}\nstderr:\n{err}")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_same_suite_gives_the_same_json_apart_from_timings(tmp_path: Path) -> None:
    import re

    texts = []
    for name in ("a.json", "b.json"):
        done = cli("run", "--engine", "refimpl", "--engine", "mygrad", "-q",
                   "--json", str(tmp_path / name))
        assert done.returncode == 0, done.stderr
        texts.append(re.sub(r'"(wall_time_s|duration_s)": [0-9.e-]+', r'"\1": 0',
                            (tmp_path / name).read_text()))
    assert texts[0] == texts[1]
