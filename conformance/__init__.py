"""The conformance runner: load YAML cases, run them on engines, judge, report.

The package reads in the order data flows, and imports point one way (each part imports only
the parts above it in this list):

- `casefile`: case files read and checked (`loader`, `case`, `vocabulary`, `features`,
  `sources`, `sandbox`);
- `engines`: the adapter interface (`Engine`, `TorchLikeEngine`) and the shipped adapters;
- `run`: one case on one engine (`executor`, `refusals`, `compare`, `repro`), engines in this
  process or in worker processes (`handle`, `workers`, `wire`);
- `verdict`: verdicts (`judge`, `expectations`, `causes`) and a suite over many engines (`suite`);
- `report`: reports of a run (`formats`) and engine reports (`engine_report`);
- front ends: `cli` (`python -m conformance`), `pytest_plugin`, `scaffold` (`new-adapter`),
  `traceability`, `fuzz` (the differential fuzzer) and `reference` (the site).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autograd-conformance")
except PackageNotFoundError:  # running from a checkout that is not installed
    __version__ = "0.1.0"
