"""Ctrl-C and a killed runner: the runner alone handles Ctrl-C, so a Ctrl-C typed in a terminal
(SIGINT to the whole process group) kills no worker, not even one being started; and a worker
does not outlive a runner that was killed, even in the middle of a hung case."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ENV = {**os.environ, "PYTHONPATH": str(HERE)}

# Each case gets a fresh worker, so workers are started all the time; Ctrl-C after Ctrl-C goes
# to the whole process group (this script's own session), and the runner survives them.
STORM = textwrap.dedent("""
    import os, signal, threading, time
    from conformance.casefile.case import Case
    from conformance.run.workers import EngineWorkers

    def case(i):
        return Case.from_dict({"id": f"topic.c{i}", "rule": "A rule.",
                               "sources": [{"doc": "doc", "quote": "q"}],
                               "steps": [{"run": "x = torch.ones(2)",
                                          "expect": {"x.is_leaf": True}}]})

    if __name__ == "__main__":
        received = []
        signal.signal(signal.SIGINT, lambda *args: received.append(1))
        done = threading.Event()

        def storm():
            while not done.is_set():
                os.killpg(0, signal.SIGINT)
                time.sleep(0.05)

        with EngineWorkers("faulty_workers:pid", fresh_worker_per_case=True) as engine:
            threading.Thread(target=storm, daemon=True).start()
            results = [engine.run(case(i)) for i in range(12)]
            done.set()
        print(len(received), [r.verdict for r in results])
        for r in results:
            if r.verdict != "passed":
                print(r.message)
    """)


def test_a_ctrl_c_to_the_whole_process_group_kills_no_worker() -> None:
    done = subprocess.run([sys.executable, "-c", STORM], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=300, start_new_session=True)
    assert done.returncode == 0, done.stdout + done.stderr
    received, verdicts = done.stdout.split(" ", 1)
    assert int(received) > 10, "the storm did not blow"
    assert verdicts.splitlines()[0] == repr(["passed"] * 12), done.stdout
    assert "KeyboardInterrupt" not in done.stderr, done.stderr


HANGS = textwrap.dedent("""
    from conformance.casefile.case import Case
    from conformance.run.workers import EngineWorkers

    case = Case.from_dict({"id": "topic.hangs", "rule": "A rule.",
                           "sources": [{"doc": "doc", "quote": "q"}],
                           "steps": [{"run": "x = torch.ones(13)",
                                      "expect": {"x.is_leaf": True}}]})
    if __name__ == "__main__":
        with EngineWorkers("faulty_workers:hangs_and_says_where") as engine:
            engine.run(case, timeout=600)
    """)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_a_worker_does_not_outlive_a_killed_runner(tmp_path: Path) -> None:
    said = tmp_path / "worker.pid"
    runner = subprocess.Popen([sys.executable, "-c", HANGS], cwd=REPO,
                              env={**ENV, "FAULTY_WORKERS_PID_FILE": str(said)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not said.exists() or not said.read_text():
            assert runner.poll() is None and time.monotonic() < deadline, "no hang started"
            time.sleep(0.1)
        worker = int(said.read_text())
        assert _alive(worker)
        runner.kill()  # SIGKILL: the runner cannot stop its workers itself
        runner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the hung worker outlived its runner"
    finally:
        try:
            os.killpg(runner.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
