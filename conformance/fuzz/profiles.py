"""Settings profiles of the fuzzer: `ci`, `dev` and `campaign`.

- `ci`: bounded and reproducible: 400 programs from a fixed seed (0 unless `--seed`), no
  example database, so every CI run fuzzes the same programs (about 5 s here).
- `dev`: 2,000 programs from a random seed, failures remembered in `.hypothesis/fuzz` so the
  next run tries them first.
- `campaign`: 20,000 programs per process from a random seed, with the example database in
  `$AUTOGRAD_FUZZ_DB` (default `.hypothesis/fuzz-campaign`); run it on every core with
  `python -m pytest conformance/fuzz/campaign.py -n auto`, and point `$AUTOGRAD_FUZZ_DB` at a
  shared folder so several machines replay each other's failures.

The same settings are registered as Hypothesis profiles (`autograd-fuzz-ci`, ...) for tests
that use `programs()` directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

DB_ENV = "AUTOGRAD_FUZZ_DB"


@dataclass(frozen=True)
class Profile:
    name: str
    examples: int
    seed: int | None
    """The Hypothesis seed when the command line gives none (None: random)."""
    database: str | None
    """Example database folder (None: no database)."""

    def database_path(self) -> Path | None:
        if self.name == "campaign":
            return Path(os.environ.get(DB_ENV, self.database or ".hypothesis/fuzz-campaign"))
        return Path(self.database) if self.database else None

    def settings(self, examples: int | None = None) -> settings:
        path = self.database_path()
        database: ExampleDatabase | None = DirectoryBasedExampleDatabase(str(path)) \
            if path is not None else None
        return settings(
            max_examples=examples if examples is not None else self.examples,
            database=database,
            deadline=None,
            # Programs are drawn step by step and some are big: those checks only cost time.
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.filter_too_much, HealthCheck.large_base_example],
            phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
            report_multiple_bugs=False,
            verbosity=Verbosity.quiet,
            print_blob=False,
        )


PROFILES = {
    "ci": Profile("ci", examples=400, seed=0, database=None),
    "dev": Profile("dev", examples=2000, seed=None, database=".hypothesis/fuzz"),
    "campaign": Profile("campaign", examples=20000, seed=None,
                        database=".hypothesis/fuzz-campaign"),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown fuzz profile {name!r}: use {', '.join(PROFILES)}") from None


def register_hypothesis_profiles() -> None:
    """Register `autograd-fuzz-<name>` with Hypothesis (for `--hypothesis-profile`)."""
    for profile in PROFILES.values():
        settings.register_profile(f"autograd-fuzz-{profile.name}", profile.settings())
