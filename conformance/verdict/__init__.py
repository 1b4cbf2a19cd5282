"""From results to verdicts: the judge of one case, engine expectations files (xfail, skip),
failures grouped by cause, and the suite run over many engines."""
