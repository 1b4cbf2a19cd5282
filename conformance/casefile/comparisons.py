"""Comparison tables (`spec/comparisons.yaml`): things users confuse, side by side.

`no_grad` against `inference_mode`, `eval()` and `requires_grad=False`; `detach()` against
`.data` and `clone()`. Each cell is a short statement and the cases that show it, so a table is
as checked as the cases it cites: `lint` refuses a cell that names no existing case id, and a
row whose cells do not match the columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.casefile.case import ID_PATTERN, cites_missing_case
from conformance.casefile.case import line_or_first as _line
from conformance.casefile.files import read_yaml
from conformance.casefile.loader import Problem

COMPARISONS = "comparisons.yaml"
COMPARISON_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Cell:
    text: str
    cases: tuple[str, ...]


@dataclass(frozen=True)
class Row:
    aspect: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Comparison:
    id: str
    title: str
    intro: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]

    @property
    def cases(self) -> list[str]:
        return list(dict.fromkeys(c for row in self.rows for cell in row.cells
                                  for c in cell.cases))


def _text(node: Mapping[str, Any], key: str, where: str, problems: list[tuple[int, str]]
          ) -> str:
    value = node.get(key)
    if not isinstance(value, str) or not value.strip():
        problems.append((_line(node, key), f"{where}: '{key}' must be a non-empty string"))
        return ""
    return " ".join(value.split())


def load_comparisons(path: Path, case_ids: Iterable[str] | None = None
                     ) -> tuple[list[Comparison], list[tuple[int, str]]]:
    """Read the tables; with `case_ids` (the cases loaded), a cited case of a loaded topic must
    be one of them (a topic not loaded cannot be checked from here)."""
    data, problems = read_yaml(path)
    problems = list(problems)
    known = set(case_ids) if case_ids is not None else None
    topics = {case_id.split(".", 1)[0] for case_id in known or ()}
    items = data.get("comparisons") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        return [], problems + [(1, "expected a mapping with 'comparisons', a list of tables")]
    found: list[Comparison] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, Mapping):
            problems.append((_line(item), "each comparison must be a mapping"))
            continue
        before = len(problems)
        table_id = _text(item, "id", "comparison", problems)
        where = f"comparison {table_id or '?'}"
        if table_id and not COMPARISON_ID.match(table_id):
            problems.append((_line(item, "id"), f"{where}: id must be lower-case words joined "
                                                f"by '-'"))
        if table_id in seen:
            problems.append((_line(item, "id"), f"{where}: duplicate id"))
        seen.add(table_id)
        title = _text(item, "title", where, problems)
        intro = _text(item, "intro", where, problems)
        columns = item.get("columns")
        if not isinstance(columns, list) or len(columns) < 2 or \
                not all(isinstance(c, str) and c.strip() for c in columns):
            problems.append((_line(item, "columns"), f"{where}: 'columns' must list two or "
                                                     f"more names"))
            columns = []
        rows = []
        for row in item.get("rows") if isinstance(item.get("rows"), list) else []:
            if not isinstance(row, Mapping):
                problems.append((_line(item, "rows"), f"{where}: each row must be a mapping"))
                continue
            aspect = _text(row, "aspect", f"{where} row", problems)
            cells = row.get("cells")
            if not isinstance(cells, list) or (columns and len(cells) != len(columns)):
                problems.append((_line(row, "cells"), f"{where} row {aspect!r}: 'cells' must "
                                                      f"hold one cell per column "
                                                      f"({len(columns)})"))
                continue
            parsed = []
            for cell in cells:
                if not isinstance(cell, Mapping):
                    problems.append((_line(row, "cells"), f"{where} row {aspect!r}: each cell "
                                                          f"is a mapping with text and cases"))
                    continue
                text = _text(cell, "text", f"{where} row {aspect!r} cell", problems)
                cited = cell.get("cases", [])
                if not isinstance(cited, list) or not cited \
                        or not all(isinstance(c, str) for c in cited):
                    problems.append((_line(cell, "cases") if "cases" in cell else _line(cell),
                                     f"{where} row {aspect!r}: 'cases' must list the case ids "
                                     f"that show the cell"))
                    cited = []
                for case_id in cited:
                    if not ID_PATTERN.match(case_id) or (
                            known is not None and cites_missing_case(case_id, known, topics)):
                        problems.append((_line(cell, "cases"), f"{where} row {aspect!r}: "
                                                               f"{case_id!r} is not a case"))
                parsed.append(Cell(text, tuple(cited)))
            rows.append(Row(aspect, tuple(parsed)))
        if not rows:
            problems.append((_line(item), f"{where}: no rows"))
        if len(problems) == before:
            found.append(Comparison(table_id, title, intro, tuple(" ".join(c.split())
                                                                  for c in columns),
                                    tuple(rows)))
    return found, problems


def read_comparisons(spec_dir: Path, case_ids: Iterable[str] | None = None
                     ) -> tuple[list[Comparison], list[Problem]]:
    """The spec folder's tables (none when it has no file) and their problems, for `lint`."""
    path = Path(spec_dir) / COMPARISONS
    if not path.is_file():
        return [], []
    tables, problems = load_comparisons(path, case_ids)
    return tables, [Problem(str(path), line, message) for line, message in problems]
