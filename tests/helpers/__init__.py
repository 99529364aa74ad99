"""What the tests share besides fixtures (those stay in each folder's conftest.py).

Imported as `tests.helpers.<module>` (the repository root is on sys.path: the
root conftest.py lives there). What benches need too lives in the package, in
`devicepool.testing` (ports, waits, the emulator's ground truth, manifests, the
dev server); these modules build on it.

    servers          the `temporal` CLI and the dev server the tests start
    settings         FAST: the pool intervals of tests that must see a pool act quickly
    histories        every run of a workflow from its histories; a readable digest
    emulator         the emulator app in process: the client's contract tests, its own tests
    transports       in-process transports with test switches (faults, gates, lags, counts)
    workflow_stack   tests/workflows: the stack's constants, workers, starting and reading pools
    pool_waits       tests/workflows: waits on a pool (converged, paused, resumed, ...)
    ratelimit_stack  tests/ratelimit: the sped-up window, accounts, the grant catcher
    obs_stack        tests/observability: the stack and its worker's metrics
    dev_stack        tests/e2e: `devicepool dev` as a process, driven by the real CLI
    chaos            tests/e2e: a scale-up under way, then converged after a blow
    device_hours     a pytest plugin: billed vs requested device-hours (the root conftest loads it)
    schedule         the xdist order from measured durations (tests/durations.json; root conftest)
"""
