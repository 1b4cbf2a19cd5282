"""Files the runner writes and reads: repro scripts stay inside `--repro-dir` whatever an
engine is called, and an expectations file may be any readable file."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from conformance.run.executor import CaseResult
from conformance.verdict.suite import EngineRun, SuiteReport

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"

HOSTILE_NAMES = ["../../escape", "/absolute/name", "..", ".hidden", "a\\..\\..\\b", "nul\x00x",
                 "x" * 1000, "sub/dir", "", "torch", "tor\u2028ch"]


class Info:
    def __init__(self, name: str) -> None:
        self.name = name


def test_repro_scripts_stay_inside_the_folder_whatever_the_engine_is_called(tmp_path: Path
                                                                            ) -> None:
    from conformance.cli import write_repros

    runs = [EngineRun(Info(name), results=[CaseResult("topic.a", name, "failed")],
                      repros={"topic.a": f"# {index}\n"})
            for index, name in enumerate(HOSTILE_NAMES)]
    inside = tmp_path / "one" / "two" / "repro"
    write_repros(SuiteReport([], runs), inside)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.parent == inside for p in written), written
    assert len(written) == len(HOSTILE_NAMES), "two engines never share a script"
    for path in written:
        assert re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*\.py", path.name), path.name
        assert len(path.name) <= 255
    assert (inside / "torch__topic.a.py").read_text() == f"# {HOSTILE_NAMES.index('torch')}\n"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


RUN = ("run", "--engine", "refimpl", "--cases", str(DATA / "cases"), "--spec",
       str(DATA / "spec"), "-k", "basic.leaf", "-q")


def test_expectations_may_be_dev_null_or_a_pipe(tmp_path: Path) -> None:
    # An empty file means no expectations; a pipe is read once, whoever reads it after.
    null = cli(*RUN, "--expectations", "refimpl=/dev/null")
    assert null.returncode == 0, null.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    report = tmp_path / "r.json"
    process = subprocess.Popen([sys.executable, "-m", "conformance", *RUN, "--expectations",
                                f"refimpl={fifo}", "--json", str(report)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    write_when_read(fifo, b"xfail:\n  basic.leaf: listed for the test\n", process)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    [result] = json.loads(report.read_text())["results"]
    assert result["verdict"] == "stale", "the listed case passed: its entry was read"
    assert f"listed as xfail in {fifo} (basic.leaf" in result["message"]


def write_when_read(fifo: Path, data: bytes, process: subprocess.Popen) -> None:
    """Write `data` into `fifo` once `process` opens it; nothing if it exits first."""
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        try:
            handle = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            time.sleep(0.05)
            continue
        with os.fdopen(handle, "wb") as stream:
            os.set_blocking(handle, True)
            stream.write(data)
        return


def test_a_folder_is_not_an_expectations_file() -> None:
    done = cli(*RUN, "--expectations", "refimpl=.")
    assert done.returncode == 2 and "refimpl=.': . is a folder" in done.stderr, done.stderr
