"""Engine factories for the selection tests (imported as `fake_engines:...`)."""

from conformance.engines import load_engine


def make_renamed_torch():
    engine = load_engine("torch")
    engine.name = "renamed-torch"
    return engine


def not_an_engine():
    return object()


def make_renamed_nodes():
    """refimpl through an adapter that names nodes its own way (as a non-torch engine would)."""
    from conformance.engines.generic import TorchLikeEngine

    class RenamedNodes(TorchLikeEngine):
        def node_name(self, node):
            return "Node:" + type(node).__name__

    return RenamedNodes("renamed-nodes", "refimpl")


def make_semantics_renamed_nodes():
    """The renamed-nodes engine held to the `semantics` level: its node names are surface."""
    engine = make_renamed_nodes()
    engine.name = "semantics-renamed-nodes"
    engine.level = "semantics"
    return engine
