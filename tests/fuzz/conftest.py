"""Fixtures for the fuzzer's tests: PyTorch engines (the oracle and the faulty wrappers)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def torch_engine():
    pytest.importorskip("torch", reason="the fuzzer's tests compare against PyTorch")
    from conformance.engines import load_engine

    return load_engine("torch")
