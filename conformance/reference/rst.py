"""reStructuredText for text that comes from case files: always shown literally.

Rules, quotes, corrections and notes are written by many hands; a quote that contains `*`,
`|`, backticks, `<script>`, `_`, `[1]_` or `.. raw:: html` must render as those characters.
reStructuredText treats a backslash-escaped character literally, so `text` escapes every ASCII
punctuation character and collapses whitespace (the cases compare quotes whitespace-collapsed,
so nothing is lost); code goes into literal blocks, where nothing is markup::

    >>> text("*bold* and `code` <b>")
    '\\\\*bold\\\\* and \\\\`code\\\\` \\\\<b\\\\>'
"""

from __future__ import annotations

import re
import textwrap

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# Control characters are not text a reader can see, and docutils rejects some of them.
_PLAIN_CODE = re.compile(r"^[A-Za-z0-9_./:@+=-]+( [A-Za-z0-9_./:@+=-]+)*$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def text(value: object) -> str:
    """Inline text, one line, every character literal."""
    plain = " ".join(_CONTROL.sub(" ", str(value)).split())
    return _PUNCTUATION.sub(r"\\\1", plain)


def code(value: object) -> str:
    """Inline code: an inline literal when the text is plain, else escaped text.

    Backslashes do not escape inside an inline literal, so only text that cannot end it early
    (letters, digits, `_./:-` and single spaces inside) becomes one.
    """
    plain = " ".join(str(value).split())
    if _PLAIN_CODE.match(plain):
        return f"``{plain}``"
    return text(plain)


def quoted(value: object) -> str:
    return f"“{text(value)}”"


def heading(title: str, underline: str) -> str:
    """A section title (already escaped) with its underline."""
    return f"{title}\n{underline * max(len(title), 4)}\n"


def indent(block: str, spaces: int = 3) -> str:
    return textwrap.indent(block, " " * spaces, lambda line: bool(line.strip()))


def literal(code: str, language: str = "none") -> str:
    """A code block: its text is never parsed as markup."""
    body = _CONTROL.sub(" ", code.expandtabs(4)).rstrip("\n") or " "
    return f".. code-block:: {language}\n\n{indent(body)}\n"


def table(header: list[str], rows: list[list[str]], widths: list[int] | None = None,
          classes: str = "") -> str:
    """A list-table; cells are reStructuredText already (escape them with `text`)."""
    out = [".. list-table::", "   :header-rows: 1"]
    if widths:
        out.append(f"   :widths: {' '.join(str(w) for w in widths)}")
    if classes:
        out.append(f"   :class: {classes}")
    out.append("")
    for row in [header, *rows]:
        for index, cell in enumerate(row):
            out.append(("   * - " if index == 0 else "     - ") + (cell or "\\ "))
    return "\n".join(out) + "\n"
