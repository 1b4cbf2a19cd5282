"""`python -m conformance`: see `conformance.cli`."""

import os
import sys

from conformance.cli import main

try:
    sys.exit(main())
except BrokenPipeError:
    # The reader of a pipe (`... list | head`) went away: stop quietly, as `ls` or `grep` would.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(1)
