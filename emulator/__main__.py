"""`python -m devicepool.emulator --port 8088`."""

import sys

from devicepool.emulator.cli import main

sys.exit(main())
