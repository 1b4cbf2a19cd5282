"""The fuzzer against hostile engines and folders: an engine that exits or raises a
KeyboardInterrupt is a finding, the user's Ctrl-C still stops the run, and an `--out` that
cannot be written stops the run before any program, so no shrunk finding is lost."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import faulty_engines
import pytest

from conformance.casefile.loader import load
from conformance.cli import main
from conformance.fuzz.runner import fuzz
from conformance.run.executor import run_case


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler, as in `python -m conformance fuzz` (a test runner may have
    put another in place)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_an_engine_that_exits_is_a_finding(torch_engine, tmp_path):
    from test_fuzz_cli import fuzz_in_a_fresh_interpreter

    status, out = fuzz_in_a_fresh_interpreter(
        "--engines", "torch,faulty_engines:make_system_exit", "--profile", "ci",
        "--examples", "1500", "--out", str(tmp_path), "--no-progress")  # see test_fuzz_cli
    assert status == 1, out
    assert "SystemExit: 3" in out and "1 mismatch" in out
    [case_file] = tmp_path.glob("fuzz_*.yaml")
    assert case_file.with_suffix(".py").exists() and str(case_file) in out
    loaded = load([case_file])
    assert loaded.problems == []
    [case] = loaded.cases
    assert run_case(case, torch_engine).verdict == "passed"
    # The case observes what the fuzzer observed, so the engine meets the node it exits on.
    try:
        verdict = run_case(case, faulty_engines.make_system_exit()).verdict
    except SystemExit:
        verdict = "exited"
    assert verdict != "passed"


def test_an_engine_that_exits_on_start_is_a_setup_error(tmp_path, capsys):
    status = main(["fuzz", "--engines", "torch,faulty_engines:make_exit_on_start",
                   "--profile", "ci", "--out", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2
    assert "cannot run a one-line program: SystemExit: no namespace" in err


def test_a_keyboard_interrupt_from_the_engine_is_a_finding(torch_engine, tmp_path,
                                                           python_sigint_handler):
    result = fuzz(torch_engine, faulty_engines.make_keyboard_interrupt(), profile="ci",
                  out=tmp_path)
    assert result.finding is not None
    assert "KeyboardInterrupt: raised by the engine" in result.finding.message()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_users_ctrl_c_still_stops_the_run(torch_engine, tmp_path, python_sigint_handler):
    with pytest.raises(KeyboardInterrupt):
        fuzz(torch_engine, faulty_engines.make_ctrl_c(), profile="ci", out=tmp_path)
    assert not any(tmp_path.iterdir())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("a file")
    return tmp_path / "notes.txt" / "findings"


def _a_file(tmp_path: Path) -> Path:
    (tmp_path / "findings").write_text("a file")
    return tmp_path / "findings"


def _read_only(tmp_path: Path) -> Path:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    (tmp_path / "ro").mkdir(mode=0o500)
    return tmp_path / "ro" / "findings"


@pytest.mark.parametrize("make_out", [_under_a_file, _a_file, _read_only])
def test_an_unwritable_out_stops_the_run_before_any_program(torch_engine, tmp_path, capsys,
                                                            monkeypatch, make_out):
    out = make_out(tmp_path)

    def no_program(*args: object) -> None:
        raise AssertionError("a program ran although --out cannot be written")

    monkeypatch.setattr("conformance.fuzz.runner.check_program", no_program)
    status = main(["fuzz", "--engines", "torch,torch", "--profile", "ci", "--out", str(out),
                   "--no-progress"])
    captured = capsys.readouterr()
    assert status == 2
    [line] = captured.err.splitlines()
    assert line.startswith(f"error: findings folder {out}") and "--out" in line
    assert "programs" not in captured.out


def test_a_writable_out_is_left_as_it_was(torch_engine, tmp_path, capsys):
    out = tmp_path / "new" / "findings"
    assert main(["fuzz", "--engines", "torch,torch", "--examples", "5", "--seed", "1",
                 "--out", str(out), "--no-progress"]) == 0
    assert not (tmp_path / "new").exists()


def test_a_finding_that_cannot_be_written_keeps_its_case_in_the_message(torch_engine, tmp_path,
                                                                        monkeypatch):
    def disk_full(finding: object, out: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("conformance.fuzz.runner.write_finding", disk_full)
    result = fuzz(torch_engine, faulty_engines.make_renamed_sum(), profile="ci", out=tmp_path)
    message = result.finding.message()
    assert f"not written: {tmp_path}: No space left on device" in message
    assert result.finding.yaml_text.rstrip() in message
