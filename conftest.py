"""Load the conformance pytest plugin when the package is not installed.

Installed, the package registers the plugin through its `pytest11` entry point; from a plain
checkout this file does it, so `pytest conformance --engine torch` works either way.
"""

from importlib.metadata import entry_points

if not any(ep.name == "autograd_conformance" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["conformance.pytest_plugin"]
