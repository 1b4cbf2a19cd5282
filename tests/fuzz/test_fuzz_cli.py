"""`python -m conformance fuzz`: exit codes, the throughput line and the findings folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.cli import main


def test_agreeing_engines_exit_zero_and_print_the_rate(torch_engine, tmp_path, capsys):
    status = main(["fuzz", "--engines", "torch,torch", "--examples", "40", "--seed", "3",
                   "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0
    assert "fuzz: 40 programs on torch (reference) vs torch, 0 mismatches" in out
    assert "programs/s" in out
    assert not any(tmp_path.iterdir())


def test_a_mismatch_exits_one_and_writes_the_finding(torch_engine, tmp_path):
    # Which programs Hypothesis draws depends on the budget as well as the seed; a budget well
    # past where the renamed node first shows keeps the test from resting on one draw (the run
    # ends at the first finding, so the budget costs nothing once it is found).
    status, out = fuzz_in_a_fresh_interpreter(
        "--engines", "faulty_engines:make_renamed_sum,torch", "--profile", "ci",
        "--examples", "1500", "--out", str(tmp_path), "--no-progress")
    assert status == 1, out
    yaml_files = list(tmp_path.glob("fuzz_*.yaml"))
    assert len(yaml_files) == 1 and yaml_files[0].with_suffix(".py").exists()
    assert "SumBackward1" in out and str(yaml_files[0]) in out
    assert main(["lint", str(yaml_files[0])]) == 0


def test_progress_bar_goes_to_stderr(torch_engine, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("conformance.fuzz.runner.Progress.tick_interval", lambda self: 0.0)
    status = main(["fuzz", "--engines", "torch,torch", "--examples", "5", "--seed", "1",
                   "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 0
    assert "5/5 programs" in captured.err and "5/5 programs" not in captured.out


@pytest.mark.parametrize(("argv", "text"), [
    (["--engines", "torch"], "two names"),
    (["--engines", "torch,nonexistent-engine"], "unknown engine"),
    (["--engines", "torch,faulty_engines:make_broken"], "cannot run a one-line program"),
    (["--engines", "torch,torch", "--reference", "refimpl"], "not one of --engines"),
    (["--engines", "torch,torch", "--examples", "0"], "at least 1"),
])
def test_usage_errors_exit_two(torch_engine, tmp_path, capsys, argv, text):
    assert main(["fuzz", *argv, "--out", str(tmp_path), "--no-progress"]) == 2
    assert text in capsys.readouterr().err


def fuzz_in_a_fresh_interpreter(*args: str) -> tuple[int, str]:
    """`python -m conformance fuzz ...` in its own process: what a Hypothesis run draws must not
    depend on what other tests did in this one."""
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-m", "conformance", "fuzz", *args],
                          cwd=here.parents[1], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(here)})
    return done.returncode, done.stdout


def test_jobs_share_the_programs_out_and_add_up(torch_engine, tmp_path, capsys):
    status = main(["fuzz", "--engines", "torch,torch", "--examples", "30", "--seed", "3",
                   "--jobs", "2", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "fuzz: 30 programs on torch (reference) vs torch, 0 mismatches" in out
    assert "seed 3, 2 processes (seeds counted up from it)" in out


def test_a_mismatch_in_one_shard_stops_the_others(torch_engine, tmp_path):
    status, out, err = fuzz_in_a_fresh_interpreter_with_stderr(
        "--engines", "faulty_engines:make_renamed_sum,torch", "--examples", "4000",
        "--seed", "0", "--jobs", "2", "--out", str(tmp_path), "--no-progress")
    assert status == 1, out + err
    assert "SumBackward1" in out, out + err
    summary = out.strip().splitlines()[-1]
    # Stopped early: far fewer than the 4,000 programs asked for ran.
    programs = int(summary.split("fuzz: ")[1].split(" programs")[0])
    assert programs < 4000, summary
    for case in tmp_path.glob("fuzz_*.yaml"):
        assert str(case) in out and main(["lint", str(case)]) == 0


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_jobs_must_be_positive_or_auto(torch_engine, tmp_path, capsys, value):
    assert main(["fuzz", "--engines", "torch,torch", "--jobs", value, "--out", str(tmp_path),
                 "--no-progress"]) == 2
    assert "--jobs must be a positive number or auto" in capsys.readouterr().err


def test_a_shard_that_cannot_start_is_a_usage_error(torch_engine, tmp_path, capsys):
    assert main(["fuzz", "--engines", "torch,faulty_engines:make_broken", "--jobs", "2",
                 "--out", str(tmp_path), "--no-progress"]) == 2
    assert "cannot run a one-line program" in capsys.readouterr().err


def test_a_fuzzing_process_that_dies_is_reported(torch_engine, tmp_path):
    status, out, err = fuzz_in_a_fresh_interpreter_with_stderr(
        "--engines", "faulty_engines:make_interpreter_killer,torch", "--examples", "2000",
        "--seed", "0", "--jobs", "2", "--out", str(tmp_path), "--no-progress")
    assert status == 2, out + err
    assert "a fuzzing process died" in err and "--jobs 1" in err


def test_an_engine_that_hangs_in_process_is_a_crash_finding(torch_engine, monkeypatch):
    from conformance.engines import load_engine
    from conformance.fuzz import runner

    monkeypatch.setattr(runner, "PROGRAM_TIMEOUT_S", 1.0)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    import faulty_engines

    program = runner.Program((runner.ProgramStep(
        "x = torch.ones(2, 2, requires_grad=True)\ny = x.sum(0)", ("grad_fn_name(y)",)),))
    found = runner.check_program(program, load_engine("torch"), faulty_engines.make_hanging())
    assert found is not None
    texts = [d.other for d in found.mismatch.differences]
    assert any("did not finish the program in 1 s (a hang)" in t for t in texts), texts


def fuzz_in_a_fresh_interpreter_with_stderr(*args: str) -> tuple[int, str, str]:
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, "-m", "conformance", "fuzz", *args],
                          cwd=here.parents[1], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(here)})
    return done.returncode, done.stdout, done.stderr


def test_mismatches_found_by_two_shards_are_all_reported(torch_engine, tmp_path, monkeypatch):
    from conformance.fuzz import parallel
    from conformance.fuzz.runner import FuzzResult

    def shard(names, examples, seed, profile, out, families, database, known=()):
        finding = f"finding of shard {seed}"
        return parallel._ShardResult(FuzzResult(names[0], names[1], examples, 1.0, seed,
                                                profile, finding=finding, first_mismatch_at=3))

    class InlinePool:
        def __init__(self, **kwargs):
            parallel._initialize(*kwargs["initargs"])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, fn, *args):
            from concurrent.futures import Future
            future = Future()
            future.set_result(shard(*args))
            return future

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", InlinePool)
    result = parallel.fuzz_in_parallel("torch", "torch", jobs=2, examples=10, seed=5,
                                       profile="ci", out=None)
    assert result.programs == 10 and result.jobs == 2
    assert {result.finding, *result.more_findings} == {"finding of shard 5", "finding of shard 6"}
    assert "2 mismatches (first at program 3 of its shard)" in result.summary()
