"""The GeeLark Open API emulator: one team's cloud phones over the vendor's signed REST API.

Written from the vendor's documentation alone, independently of any client: the contract
tests of a GeeLark adapter are worth something only so. What it reproduces, and what it chose
where the documentation is silent, is in docs/geelark-emulator.md; in short:

- every call a signed `POST` (key mode: SHA-256 over appId + traceId + ts + nonce + key; or
  a Bearer token), answered HTTP 200 `{traceId, code, msg, data}` (`_envelope`);
- batch endpoints answer per item, `code: 0` however many items failed (`_bodies`);
- power is separate from existence: `addNew` makes a shut-down phone, `start` boots it
  asynchronously, `delete` is refused while started, energySavingMode stops an idle phone
  (`_phones`, `_phone_calls`, `_power_calls`);
- 200 requests/min and 24,000/h per endpoint, a two-hour lock on an hourly overrun,
  concurrency, daily create/open quotas, the profile cap and the balance (`_limits`);
- per-running-minute billing with a daily cap per phone, monthly rental (`_billing`);
- the `/_emulator` control plane: stats, faults (`_faults`), clock, secrets, reset, and
  a phone stopped by the provider, expired, busy or touched.

- in memory, or kept in a `--state` file across restarts (`_statefile`).

Public surface: `GeeLarkConfig`, `GeeLarkEmulator`, `StateFileError`, `create_app`, `sign` (the
documented signature), `main` (the CLI).
"""

from devicepool.emulator.geelark._envelope import sign
from devicepool.emulator.geelark.app import (
    GeeLarkConfig,
    GeeLarkEmulator,
    StateFileError,
    create_app,
)
from devicepool.emulator.geelark.cli import main

__all__ = ["GeeLarkConfig", "GeeLarkEmulator", "StateFileError", "create_app", "main", "sign"]
