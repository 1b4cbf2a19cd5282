"""Where the specification lives and how its YAML files are read.

A wheel carries the specification inside the package (`conformance/spec`, copied from the
repository's top-level `spec/` when the wheel is built); a checkout reads `spec/` itself.

Case files are untrusted input: `read_yaml` bounds what reading one may cost (size, nesting,
the length of an integer) and turns every failure into a problem with a line, never an
exception. It reads timestamps (`2024-01-01`) as the text they are: no file here holds dates,
and PyYAML raises on a date that does not exist (`2024-13-45`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PACKAGE_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_DIR.parent
DEFAULT_SPEC_DIR = (PACKAGE_DIR / "spec" if (PACKAGE_DIR / "spec" / "cases").is_dir()
                    else REPO_ROOT / "spec")
MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 40
MAX_INT_DIGITS = 4_300
"""Decimal digits of an integer in a YAML file: Python's default limit for turning an int into
text (`sys.get_int_max_str_digits`), past which no report or message could show it."""
_INT_BOUND = 10 ** MAX_INT_DIGITS


class LineDict(dict):
    """A mapping from the YAML file that remembers where it and each of its keys start."""

    line: int
    key_lines: dict[Any, int]
    text_lines: dict[Any, int]


class LineList(list):
    line: int
    item_lines: list[int]
    """Where each item starts."""


class _LineLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that records line numbers and reports duplicate keys and values no
    constructor can read (`!!int abc`, an integer past `MAX_INT_DIGITS`), each of which is then
    read as its text.

    It refuses anchors and aliases (`&a`, `*a`): a case file has no need of them, and aliases
    nested in aliases expand exponentially (a "billion laughs" file). It also refuses nesting
    deeper than `MAX_DEPTH`, which composing and constructing would otherwise recurse through.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.problems: list[tuple[int, str]] = []
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (&name, *name) are not allowed in case files: "
                "write the value out", event.start_mark)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            # PyYAML's constructors raise these for text their tag cannot be (`!!bool maybe`).
            text = node.value if isinstance(node, yaml.ScalarNode) else None
            shown = repr(text) if text is None or len(text) <= 40 else \
                f"{text[:30]!r}... ({len(text)} characters)"
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            why = f": {exc}" if isinstance(exc, ValueError) else ""
            self.problems.append((node.start_mark.line + 1, f"cannot read {shown} as {tag}{why}"))
            return text


def _construct_int(loader: _LineLoader, node: yaml.ScalarNode) -> int:
    digits = len(node.value.lstrip("+-").replace("_", ""))
    # Checked before converting too: base 60 (`1:2:3`) converts in time quadratic in length.
    value = 0 if digits > MAX_INT_DIGITS else loader.construct_yaml_int(node)
    if digits > MAX_INT_DIGITS or abs(value) >= _INT_BOUND:
        raise ValueError(f"an integer may have at most {MAX_INT_DIGITS} decimal digits: write it "
                         "shorter, or quote it if it is text")
    return value


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    mapping = LineDict()
    mapping.line = node.start_mark.line + 1
    mapping.key_lines = {}
    mapping.text_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                "found an unhashable key", key_node.start_mark,
            ) from None
        line = key_node.start_mark.line + 1
        if key in mapping:
            loader.problems.append((line, f"duplicate key {key!r} (first on line "
                                          f"{mapping.key_lines[key]})"))
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = line
        # A block scalar (`run: |`) starts its text on the line after the indicator.
        block = isinstance(value_node, yaml.ScalarNode) and value_node.style in ("|", ">")
        mapping.text_lines[key] = value_node.start_mark.line + 1 + (1 if block else 0)
    return mapping


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    items = LineList(loader.construct_object(child, deep=True) for child in node.value)
    items.line = node.start_mark.line + 1
    items.item_lines = [child.start_mark.line + 1 for child in node.value]
    return items


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_LineLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_LineLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)


def read_yaml(path: Path) -> tuple[Any, list[tuple[int, str]]]:
    """Parse a YAML file with line numbers; returns the data and `(line, message)` problems.

    Every failure, however the file is broken, is a problem with a line, never an exception.
    """
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, [(1, f"the file has {size} bytes; a case file may have at most "
                              f"{MAX_FILE_BYTES} (split it by topic)")]
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [(1, f"cannot read the file: {exc}")]
    loader = None
    try:
        loader = _LineLoader(text)
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        return None, [(line, f"invalid YAML: {exc.problem or exc.context}")]
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        return None, [(line, f"invalid YAML: the control character {exc.character!r} is not "
                             "allowed in a YAML file")]
    except yaml.YAMLError as exc:
        return None, [(1, f"invalid YAML: {exc}")]
    except (RecursionError, MemoryError) as exc:
        return None, [(1, f"the file is too deeply nested or too large to read "
                          f"({type(exc).__name__})")]
    finally:
        if loader is not None:
            loader.dispose()
    return data, list(loader.problems)


def read_yaml_list(path: Path, key: str) -> list[Any]:
    """The list under `key` of the YAML mapping in `path` (a known-differences or findings
    file); ValueError, saying where, when the file is broken or holds something else."""
    data, problems = read_yaml(path)
    if problems:
        line, message = problems[0]
        raise ValueError(f"{path}:{line}: {message}")
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a mapping with a '{key}' list")
    return entries
