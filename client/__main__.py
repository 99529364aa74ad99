"""`python -m devicepool.client`: the `devicepool` CLI without the console script (used by `devicepool dev`)."""

import sys

from devicepool.client.cli import main

if __name__ == "__main__":
    sys.exit(main())  # main() ends the process itself
