"""`run` shows a progress line on stderr for a person at a terminal, and nothing otherwise."""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
RUN = [sys.executable, "-m", "conformance", "run", "--engine", "refimpl", "--cases",
       str(DATA / "cases"), "--spec", str(DATA / "spec")]


def run_with_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run `args` with stderr on a pseudo-terminal: exit status, stdout, what the terminal got."""
    controller, terminal = pty.openpty()
    # A new pseudo-terminal is 0 columns wide, where a progress line has no room at all.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=terminal,
                                   stdin=subprocess.DEVNULL)
    finally:
        os.close(terminal)
    shown = bytearray()
    try:
        while True:
            ready, _, _ = select.select([controller], [], [], 300)
            if not ready:
                process.kill()
                break
            try:
                chunk = os.read(controller, 65536)
            except OSError as exc:  # EIO: every writer of the terminal has closed it
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    out = process.stdout.read().decode()
    process.stdout.close()
    return process.wait(timeout=60), out, shown.decode(errors="replace")


def test_progress_shows_on_a_terminal_only() -> None:
    status, out, shown = run_with_terminal(RUN)
    assert status == 0, shown
    assert "conformance:" in shown and "/4" in shown, shown
    assert "TOTAL  refimpl" in out, "the summary still goes to stdout"
    # A file, a pipe, a CI log: nothing, and nothing either with -q.
    done = subprocess.run(RUN, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    status, _, shown = run_with_terminal([*RUN, "-q"])
    assert status == 0 and shown == "", shown
