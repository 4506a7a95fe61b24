"""``python -m app.cli``: the same as the ``opensession`` entry point."""

import sys

from app.cli import main

sys.exit(main())
