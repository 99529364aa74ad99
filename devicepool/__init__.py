"""devicepool: keeps pools of rented cloud phones and browser profiles at size, on Temporal.

The only top-level name this distribution installs; its layers are subpackages
(`devicepool.api`, `.workflows`, `.activities`, `.worker`, `.client`, `.emulator`), each a folder
at the top of the repository: docs/architecture.md, 'Layers'. `devicepool.connect` is the one
Temporal connection factory."""

__version__ = "0.2.0"
