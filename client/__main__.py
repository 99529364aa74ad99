"""`python -m client`: the `devicepool` CLI without the console script (used by `devicepool dev`)."""

import sys

from client.cli import main

if __name__ == "__main__":
    sys.exit(main())  # main() ends the process itself
