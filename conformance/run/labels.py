"""The one rule for the names and labels that reach a report, a terminal or a page.

An engine's name, version, level and verdicts come from the engine (its adapter's `describe()`
runs in a worker process) or from a JSON report file: text nobody in this process wrote. Where
it enters it is checked here; every writer escapes it again for its own format.

    >>> engine_name("torch-compiled-autograd", "an engine's describe()")
    'torch-compiled-autograd'
    >>> known("semantics", ("full", "semantics"), "level", "report.json")
    'semantics'
    >>> plain_line("1.0\\x1b[2J\\nfake line", 40)
    '1.0\\\\x1b[2J\\\\x0afake line'

An engine's name becomes a file name (`engines/<name>.rst`), a link target and a class name,
so it is held to `NAME`: letters, digits and `._+:-`, a letter or digit first, no `..`.
"""

from __future__ import annotations

import re
from collections.abc import Collection

NAME = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._+:-]{0,63}")
"""What an engine's name may be: safe as a file name, a URL part, a reStructuredText link
target and an HTML attribute, whatever a writer forgets to escape."""
CUT = "…"
"""What ends a line `plain_line` cut short."""
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")
"""What a terminal obeys instead of showing (C0, DEL, C1 with its 8-bit CSI and NEL), what
breaks a line where a reader does not expect it (U+2028, U+2029) and what reorders the text
shown after it (bidi marks, embeddings, overrides and isolates)."""


class LabelError(ValueError):
    """A name or label that cannot be shown as it is; the message says where it came from."""


def engine_name(text: str, where: str) -> str:
    """`text` if it is a valid engine name (`NAME`), else LabelError naming `where` (the
    adapter, the report file) it came from."""
    if isinstance(text, str) and NAME.fullmatch(text):
        return text
    raise LabelError(
        f"{where}: the engine name {_shown(text)} is not a valid name: use 1 to 64 letters, "
        "digits and '._+:-', starting with a letter or digit, without '..' (the name becomes "
        "a file name and a link on the reference's pages)")


def known(text: str, allowed: Collection[str], what: str, where: str) -> str:
    """`text` if it is one of `allowed` (the levels, the verdicts, ...), else LabelError
    naming `what` it should be and `where` it came from."""
    if isinstance(text, str) and text in allowed:
        return text
    raise LabelError(f"{where}: {_shown(text)} is not a known {what}: use one of "
                     f"{', '.join(allowed)}")


def plain_line(text: str, limit: int = 200) -> str:
    """Free text (a version, a device) as one line a terminal shows as it is: every control
    character (newlines and ESC included) and lone surrogate written as a visible escape such
    as `\\x1b`, and no more than `limit` characters, the last of them `CUT` if it was cut."""
    line = escape_controls(str(text))
    return line if len(line) <= limit else line[:max(limit - 1, 0)] + CUT


def escape_controls(text: str, keep: str = "") -> str:
    """`text` with each control character but those in `keep` (e.g. newline and tab) and each
    lone surrogate (it cannot be encoded) written as a visible escape: `\\x1b`, `\\u202e`."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return CONTROL.sub(lambda m: m.group() if m.group() in keep else _visible(m.group()), text)


def _visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _shown(text: object) -> str:
    """`text` for an error message: quoted, escaped and not too long to read."""
    return f"'{plain_line(text, 80)}'" if isinstance(text, str) else \
        f"(a {type(text).__name__}, not a string)"
