"""``python -m transformer_book ...``: the command line of :mod:`transformer_book.cli`."""

import sys

from transformer_book.cli import main

if __name__ == "__main__":
    sys.exit(main())
