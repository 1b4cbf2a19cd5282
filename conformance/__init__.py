"""The conformance runner: load YAML cases, run them on engines, report.

The parts: `loader` (case files, checks), `executor` (`run_case`), `engines` (adapters),
`suite` (many cases on many engines), `reports` (terminal, JSON, JUnit, Markdown), `repro`
(standalone scripts), `cli` (`python -m conformance`) and `pytest_plugin`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autograd-conformance")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.1.0"
