"""Implementers' expectation files: which cases an engine is known to fail, and why.

A file is a YAML mapping with up to two sections, each mapping a case-id prefix to a reason::

    xfail:                                   # run; a failure or error is reported as xfail
      grad_mode.inference: MyGrad has no inference mode
    skip:                                    # not run at all (reported as unsupported)
      higher_order.: MyGrad cannot differentiate a gradient
    isolate:                                 # as xfail, and the engine's worker is replaced
      errors.advanced-index-checks: "BUG: ... corrupts the process's memory"   # after the case

The longest matching prefix wins. A prefix is the start of a case id that names at least its
topic and the dot (`higher_order.`, `grad_mode.inf`): an empty one would match every case. A
listed case that passes is reported as `stale`, and so is an entry whose prefix matches no case
that ran (`Expectations.unused`).

The file may be any readable file: an empty one (`/dev/null`) lists nothing, and a pipe or a
device is read once (`read_once`), however many times a run loads it.
"""

from __future__ import annotations

import contextlib
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conformance.casefile.case import line_of
from conformance.casefile.files import MAX_FILE_BYTES, read_yaml

SECTIONS = ("xfail", "skip", "isolate")
"""`isolate` is `xfail` for a case that may damage the process it runs in (corrupt its heap,
leave a thread behind): no later case may run in that process, so its worker is replaced."""
PREFIX = re.compile(r"[a-z0-9_]+\.([a-z0-9_-]+(\.[a-z0-9_-]+)*\.?)?")
"""The start of a case id (`conformance.casefile.case.ID_PATTERN`), at least `topic.`; matched
whole (`fullmatch`)."""
_COPIES: dict[str, Path] = {}
"""A file read once by `read_once` (by the path as given): the copy every load reads."""


class ExpectationsError(ValueError):
    """The file is malformed; the message starts with `file:line:`."""


@dataclass(frozen=True)
class Entry:
    kind: str
    prefix: str
    reason: str
    line: int | None = None


@dataclass
class Expectations:
    entries: list[Entry] = field(default_factory=list)
    source: str = "<none>"
    used: set[str] = field(default_factory=set)

    @classmethod
    def load(cls, path: Path | None) -> Expectations:
        if path is None:
            return cls()
        data, problems = read_yaml(_COPIES.get(str(path), Path(path)))
        if problems:
            line, message = problems[0]
            raise ExpectationsError(f"{path}:{line}: {message}")
        data = data or {}
        if not isinstance(data, Mapping):
            raise ExpectationsError(f"{path}:1: must be a mapping with sections {SECTIONS}")
        entries = []
        for kind, section in data.items():
            if kind not in SECTIONS:
                raise ExpectationsError(
                    f"{path}:{line_of(data, kind)}: unknown section {kind!r} "
                    f"(use {', '.join(SECTIONS)})"
                )
            if not isinstance(section, Mapping):
                raise ExpectationsError(
                    f"{path}:{line_of(data, kind)}: {kind} must map case-id prefixes to reasons"
                )
            for prefix, reason in section.items():
                line = line_of(section, prefix) or line_of(section) or 1
                if not isinstance(prefix, str) or not PREFIX.fullmatch(prefix):
                    raise ExpectationsError(
                        f"{path}:{line}: {kind} entry {_shown(prefix)} names no case: write the "
                        "start of a case id, at least its topic and the dot (grad_mode. or "
                        "grad_mode.inference)"
                    )
                if not isinstance(reason, str) or not reason.strip():
                    raise ExpectationsError(
                        f"{path}:{line}: entry {prefix!r} needs a reason (prefix: reason)"
                    )
                entries.append(Entry(kind, prefix, reason, line))
        return cls(entries, str(path))

    def match(self, case_id: str) -> Entry | None:
        best = None
        for entry in self.entries:
            if case_id.startswith(entry.prefix) and (best is None
                                                    or len(entry.prefix) > len(best.prefix)):
                best = entry
        if best is not None:
            self.used.add(best.prefix)
        return best

    def unused(self, case_ids: Iterable[str] | None = None) -> list[Entry]:
        """Entries that matched no case (all of `case_ids` when given, else those run)."""
        if case_ids is not None:
            ids = list(case_ids)
            return [e for e in self.entries if not any(i.startswith(e.prefix) for i in ids)]
        return [e for e in self.entries if e.prefix not in self.used]


@contextlib.contextmanager
def read_once(paths: Iterable[Path]) -> Iterator[None]:
    """While open, each of `paths` that is not a regular file (a pipe, `/dev/stdin`, a device)
    has been read once, here, and every `Expectations.load` of it reads that copy, while
    reporting the path as given. (A run loads its files more than once, and a pipe can be read
    only once; a device such as /dev/zero is read no further than a file may be long.)"""
    with tempfile.TemporaryDirectory(prefix="expectations-") as folder:
        added = []
        try:
            for index, path in enumerate(paths):
                if str(path) in _COPIES or _is_regular(Path(path)):
                    continue
                try:
                    with open(path, "rb") as stream:
                        data = stream.read(MAX_FILE_BYTES + 1)
                except OSError as exc:
                    raise ExpectationsError(f"{path}:1: cannot read the file: "
                                            f"{exc.strerror or exc}") from exc
                copy = Path(folder) / f"{index}.yaml"
                copy.write_bytes(data)
                _COPIES[str(path)] = copy
                added.append(str(path))
            yield
        finally:
            for key in added:
                _COPIES.pop(key, None)


def _shown(prefix: object) -> str:
    text = repr(prefix)
    return text if len(text) <= 60 else f"{text[:50]}... ({len(text)} characters)"


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False
