"""`python -m devicepool.emulator.geelark --port 8090`."""

import sys

from devicepool.emulator.geelark.cli import main

sys.exit(main())
