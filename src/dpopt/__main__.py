"""``python -m dpopt``: the ``dpopt`` command."""

import sys

from dpopt.cli import main

sys.exit(main())
