"""``python -m transformer_book ...``: the command line of :mod:`transformer_book.cli`."""

import sys

from transformer_book.cli import build_parser, main  # noqa: F401 (the `transformer-book` script)
from transformer_book.cli.train import (  # noqa: F401 (tests/test_distributed.py imports it here)
    resume_command as _resume_command,
)

if __name__ == "__main__":
    sys.exit(main())
