"""`python -m emulator --port 8088`."""

import sys

from emulator.cli import main

sys.exit(main())
