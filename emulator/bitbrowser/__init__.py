"""The BitBrowser Local API emulator: browser profiles (`/browser/*`) and cloud phones
(`/phone/*`) of one account, served to several nodes that share them.

Written from the vendor's documentation alone, independently of any client:
the contract tests of a Local API client are worth something only so. What it
reproduces, and what it chose where the documentation is silent, is in
docs/bitbrowser-emulator.md; in short:

- every call a `POST` with a JSON body, answered HTTP 200 `{success, data}` or
  `{success: false, msg}` with Chinese `msg` and no code (`_envelope`); with
  API auth on, `x-api-key` is required (a refusal: HTTP 403, configurable);
- profiles belong to the account: each node's app (`create_apps`) lists the
  same ones; a browser process belongs to the node that opened it;
- `/browser/update` with an id replaces the record, refusing a body that would
  drop a field; `/browser/update/partial` merges; no idempotency key;
- `/browser/open` takes launch time, one open in flight per node (`queue:
  true` waits); `close` succeeds while the process lingers; stuck states need
  `/browser/closing/reset`; list and detail answers carry secrets;
- cloud phones: power-billed, asynchronous power-on, no delete, a budget of 1
  request per second (what happens past it is configurable);
- the `/_emulator` control plane: stats, secrets, faults, clock, node up/down,
  kill a browser, take a phone offline, reset;
- separate processes of one account share it through a file (the `--state`
  file, which keeps it across restarts, or one under `--accounts-dir` while
  any of them runs), each call a transaction under its lock (`_statefile`);
  browsers stay on their node and do not survive a restart.

Public surface: `BitBrowserConfig`, `BitBrowserEmulator`, `StateFileError`,
`create_app`, `create_apps`, `main` (the CLI).
"""

from devicepool.emulator.bitbrowser.app import (
    BitBrowserConfig,
    BitBrowserEmulator,
    StateFileError,
    create_app,
    create_apps,
)
from devicepool.emulator.bitbrowser.cli import main

__all__ = [
    "BitBrowserConfig",
    "BitBrowserEmulator",
    "StateFileError",
    "create_app",
    "create_apps",
    "main",
]
