"""Settings profiles of the fuzzer (`ci`, `dev` and `campaign`) and its example database.

- `ci`: bounded and reproducible: 400 programs from a fixed seed (0 unless `--seed`), no
  example database, so every CI run fuzzes the same programs (about 5 s here).
- `dev`: 2,000 programs from a random seed, failures remembered in `.hypothesis/fuzz` so the
  next run tries them first.
- `campaign`: 20,000 programs per process from a random seed, with the example database in
  `$AUTOGRAD_FUZZ_DB` (default `.hypothesis/fuzz-campaign`); run it on every core with
  `python -m pytest conformance/fuzz/campaign.py -n auto`.

The example database is where Hypothesis keeps the programs that failed, to replay them first
next time. It is a folder, or a Redis server shared by the machines of a campaign:

    AUTOGRAD_FUZZ_DB=redis://fuzz-db.internal:6379/0       # campaign profile
    python -m conformance fuzz --db redis://fuzz-db.internal:6379/0

A Redis database is opened with `open_database`, which checks the URL and reaches the server
first, so a typo or a server that is down stops the run before any program, with one line
naming the URL. Each machine also keeps a local copy of what it writes (in the profile's
folder; a failure replayed from Redis that still fails is written again, so it lands there
too): a failure stays replayable here when Redis is flushed, expires it (after 8 days unused)
or is down, and a Redis outage during a run only stops the sharing, never the run or the
finding being shrunk. A seed (`--seed`, `$AUTOGRAD_FUZZ_SEED`) picks the new programs and does
not turn the database off.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
)

DB_ENV = "AUTOGRAD_FUZZ_DB"
REDIS_SCHEMES = ("redis", "rediss")
REDIS_KEY_PREFIX = b"autograd-fuzz:"
"""Keys this fuzzer writes in Redis start with this, so a shared server tells them apart."""
CONNECT_TIMEOUT = 5.0
"""Seconds to reach the Redis server; each operation may take up to twice that."""
LOCAL_COPY = ".hypothesis/fuzz"
"""The local copy of a Redis database for a profile without a folder of its own (`ci`)."""
_FIX = f"set ${DB_ENV} or --db to a reachable redis://host:port/db URL or a folder"


class DatabaseError(RuntimeError):
    """The example database cannot be used; the message is one line that names it."""


@dataclass(frozen=True)
class Profile:
    name: str
    examples: int
    seed: int | None
    """The Hypothesis seed when the command line gives none (None: random)."""
    database: str | None
    """Example database folder (None: no database)."""

    def database_location(self, override: str | None = None) -> str | None:
        """The database to use: `override`, else `$AUTOGRAD_FUZZ_DB` for the campaign profile,
        else the profile's folder (None: none)."""
        if override:
            return override
        if self.name == "campaign":
            return os.environ.get(DB_ENV) or self.database
        return self.database

    def open_database(self, override: str | None = None) -> ExampleDatabase | None:
        """The example database (see `open_database`); raises DatabaseError."""
        return open_database(self.database_location(override), Path(self.database or LOCAL_COPY))

    def settings(self, examples: int | None = None, database: str | None = None) -> settings:
        """Hypothesis settings; `database` overrides the profile's (see `database_location`).

        Opens the database, so raises DatabaseError for one that cannot be used.
        """
        return settings(
            max_examples=examples if examples is not None else self.examples,
            database=self.open_database(database),
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


def is_url(location: str) -> bool:
    """Whether a database location is meant as a URL rather than a folder."""
    return "://" in location or location.split(":", 1)[0].lower() in REDIS_SCHEMES


def shown(url: str) -> str:
    """`url` with its password hidden, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def open_database(location: str | None, local_copy: Path | None = None
                  ) -> ExampleDatabase | None:
    """The example database at `location`: None, a folder, or a `redis://host:port/db` URL.

    A Redis server is reached (PING) before this returns, so a bad URL or a server that is down
    raises DatabaseError now, before any program runs. With `local_copy`, what is read from and
    written to Redis is kept in that folder too, and a Redis failure later in the run costs
    only the sharing (one warning), not the run.
    """
    if location is None:
        return None
    if not is_url(location):
        return DirectoryBasedExampleDatabase(location)
    shared = _redis_database(location)
    if local_copy is None:
        return shared
    return MultiplexedDatabase(DirectoryBasedExampleDatabase(str(local_copy)), shared)


def _redis_database(url: str) -> ExampleDatabase:
    name = shown(url)
    parts = urlsplit(url)
    if parts.scheme.lower() not in REDIS_SCHEMES:
        raise DatabaseError(f"example database {name}: only redis:// and rediss:// URLs are "
                            f"supported; {_FIX}")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError:
        raise DatabaseError(f"example database {name}: the port is not a number; "
                            f"{_FIX}") from None
    db = parts.path.strip("/")
    if not parts.hostname or not (db == "" or db.isdigit()) or parts.query or parts.fragment:
        raise DatabaseError(f"example database {name} is not a redis://host:port/db URL "
                            f"(db a number, no query); {_FIX}")
    try:
        import redis
    except ImportError:
        raise DatabaseError(f"example database {name} needs the redis package: "
                            "pip install redis") from None
    from hypothesis.extra.redis import RedisExampleDatabase

    client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT,
                                  socket_timeout=2 * CONNECT_TIMEOUT)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise DatabaseError(f"example database {name} is unreachable ({reason}): start "
                            f"redis-server there or {_FIX}") from None
    database = RedisExampleDatabase(client, key_prefix=REDIS_KEY_PREFIX)
    return _BestEffort(database, name, (redis.RedisError, OSError))


class _BestEffort(ExampleDatabase):
    """A shared database whose failures are a warning, after which it is left alone.

    Hypothesis saves a failing program while it shrinks it: an exception from the database
    there would end the run and lose the finding. Leaving the server alone after one failure
    keeps a server that times out from costing seconds per save.
    """

    def __init__(self, wrapped: ExampleDatabase, name: str,
                 errors: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.wrapped = wrapped
        self.name = name
        self.errors = errors
        self.failed = False

    def __repr__(self) -> str:
        return f"_BestEffort({self.wrapped!r})"

    def _call(self, method: str, *args: Any) -> Any:
        if self.failed:
            return None
        try:
            result = getattr(self.wrapped, method)(*args)
            return list(result) if method == "fetch" else result
        except self.errors as exc:
            self.failed = True
            warnings.warn(f"example database {self.name} failed ({type(exc).__name__}: "
                          f"{exc}); this run no longer shares its examples", RuntimeWarning,
                          stacklevel=3)
            return None

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self._call("fetch", key) or []

    def save(self, key: bytes, value: bytes) -> None:
        self._call("save", key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call("delete", key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call("move", src, dest, value)
