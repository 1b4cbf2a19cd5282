"""Known differences are counted, not reported; a mismatch that does not show again is an
unstable finding, not a Hypothesis traceback."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conformance.engines.generic import FACTORIES, TorchLikeEngine
from conformance.fuzz.differential import Difference, Mismatch
from conformance.fuzz.known import (
    KnownDifference,
    KnownDifferencesError,
    known_finding,
    load_known,
)
from conformance.fuzz.runner import fuzz

NOISE = "noise from the engine"
KNOWN = (KnownDifference("noisy-factories", "warnings", NOISE),)


class NoisyTorch(TorchLikeEngine):
    """PyTorch whose tensor factories warn: every time, or (`once`) at one call only, the 20th
    of the process, past the fuzzer's preflight (state one program leaves to the next)."""

    def __init__(self, once: bool = False) -> None:
        super().__init__("noisy-torch", "torch", repro_import="import torch")
        self.once = once
        self.calls = 0

    def namespace(self, rng: np.random.Generator) -> dict[str, Any]:
        namespace = super().namespace(rng)
        return {**namespace, "torch": _Warning(namespace["torch"], self)}


class _Warning:
    def __init__(self, facade: Any, engine: NoisyTorch) -> None:
        self._facade, self._engine = facade, engine
        self.nn = facade.nn

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._facade, name)
        if name not in FACTORIES:
            return value

        def made(*args: Any, **kwargs: Any) -> Any:
            self._engine.calls += 1
            if not self._engine.once or self._engine.calls == 20:
                warnings.warn(NOISE, UserWarning, stacklevel=2)
            return value(*args, **kwargs)

        return made


def test_a_mismatch_is_known_only_when_every_difference_is() -> None:
    noise = Difference("warnings", "no warning", f"UserWarning: {NOISE}")
    value = Difference("x.grad", "[1.0]", "[2.0]")
    assert known_finding(Mismatch(0, (noise,)), KNOWN) == "noisy-factories"
    assert known_finding(Mismatch(0, (noise, value)), KNOWN) is None


def test_a_bad_known_file_says_where(tmp_path: Path) -> None:
    path = tmp_path / "known.yaml"
    path.write_text("known:\n  - finding: f\n    what: warnings\n")
    with pytest.raises(KnownDifferencesError, match=r"known.yaml: entry 0: other"):
        load_known(path)
    path.write_text("known:\n  - finding: f\n    what: warnings\n    other: x\n")
    assert load_known(path) == (KnownDifference("f", "warnings", "x"),)


def test_known_differences_are_counted_not_reported(torch_engine, tmp_path: Path) -> None:
    result = fuzz(torch_engine, NoisyTorch(), examples=30, seed=3, out=tmp_path, known=KNOWN)
    assert result.finding is None
    assert result.known.get("noisy-factories", 0) > 0
    assert "with known differences only (noisy-factories" in result.summary()
    # Without the file, the same noise is a finding.
    assert fuzz(torch_engine, NoisyTorch(), examples=30, seed=3, out=tmp_path).finding


def test_a_mismatch_that_does_not_show_again_is_an_unstable_finding(torch_engine,
                                                                    tmp_path: Path) -> None:
    result = fuzz(torch_engine, NoisyTorch(once=True), examples=30, seed=3, out=tmp_path)
    assert result.finding is not None
    assert result.finding.unstable
    assert "unstable: the engines agreed when the program ran again" in result.finding.message()
