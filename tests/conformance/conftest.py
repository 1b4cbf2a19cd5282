"""Fixtures for the runner's tests: the small spec under data/ and the torch engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.casefile.loader import SpecResources

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def resources() -> SpecResources:
    return SpecResources.load(DATA / "spec", texts_dir=DATA / "texts")


@pytest.fixture(scope="session")
def torch_engine():
    pytest.importorskip("torch", reason="the runner's tests use PyTorch as the real engine")
    from conformance.engines import load_engine

    return load_engine("torch")
