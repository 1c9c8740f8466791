"""``python -m rmqlog``: the ``rmqlog`` command line (see :mod:`rmqlog.cli`)."""

import sys

from rmqlog.cli import main

if __name__ == "__main__":
    sys.exit(main())
