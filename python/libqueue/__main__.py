"""``python -m libqueue``: the command line (``libqueue.cli``)."""

import sys

from libqueue.cli import main

sys.exit(main())
