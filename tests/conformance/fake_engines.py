"""Engine factories for the selection tests (imported as `fake_engines:...`)."""

from conformance.engines import load_engine


def make_renamed_torch():
    engine = load_engine("torch")
    engine.name = "renamed-torch"
    return engine


def not_an_engine():
    return object()
