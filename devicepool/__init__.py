"""devicepool: keeps pools of rented cloud phones at their declared size, on Temporal.

The only top-level name this distribution installs. Its layers are subpackages,
each a folder at the top of the repository (docs/architecture.md)::

    devicepool.api         the DevicePool resource: models, validation, status
    devicepool.workflows   deterministic orchestration (the pool loop, its children)
    devicepool.activities  every side effect: provider clients, proxies, metrics
    devicepool.worker      process wiring: config, workers, /metrics, shutdown
    devicepool.client      the user's side: `PoolClient` and the `devicepool` CLI
    devicepool.emulator    local provider emulators (shares no code with the rest)

`devicepool.connect` is the one Temporal connection factory.
"""

__version__ = "0.1.0"
