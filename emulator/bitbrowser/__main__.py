"""`python -m devicepool.emulator.bitbrowser --nodes 2 --port 54345`."""

import sys

from devicepool.emulator.bitbrowser.cli import main

sys.exit(main())
