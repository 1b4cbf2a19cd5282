"""The specification reference: a static HTML site generated from the spec with Sphinx.

    python -m conformance docs --out build/reference
    python -m conformance docs --out build/reference --reports reports/

Modules: `generate` reads the spec and writes the page sources, `session` renders a case as a
PyTorch session, `printing` prints values as PyTorch does (NumPy only), `rst` keeps text from
case files literal, `results` gathers the engines' verdicts, `sphinx_ext` gives cases and claims
their ids as anchors, `cli` is the `docs` command. Sphinx is imported only when a site is built.
"""
