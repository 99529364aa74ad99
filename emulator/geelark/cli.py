"""`python -m devicepool.emulator.geelark` / `devicepool emulator --geelark`.

Serves one emulated GeeLark team on `--port` (with `--port 0`, a free one). Once it listens,
one line goes to stdout: `geelark http://127.0.0.1:8090`. Exit codes: 0 after a clean
shutdown (SIGINT/SIGTERM), 2 for bad flags or a port it cannot listen on.
"""

from __future__ import annotations

import argparse
import sys

from devicepool.emulator._serve import bind, run
from devicepool.emulator.cli import (
    _non_negative_float,
    _non_negative_int,
    _positive_float,
    _positive_int,
    add_choice,
    add_clock_flags,
    config_of,
    new_parser,
)
from devicepool.emulator.geelark.config import (
    BATCH_ENVELOPES,
    DEFAULT_API_KEY,
    DEFAULT_APP_ID,
    DEFAULT_PORT,
    DEFAULT_TOKEN,
    PLANS,
    GeeLarkConfig,
)

PROG = "devicepool-geelark-emulator"
DEFAULT_TOKEN_NAME = "the dev token, see docs/geelark-emulator.md"


# (flag, type, default, help); each flag's dest is a GeeLarkConfig field.
_KNOBS: list[tuple[str, object, object, str]] = [
    (
        "--requests-per-minute",
        _positive_int,
        200,
        "calls per endpoint per credential per minute (40007 past it)",
    ),
    (
        "--requests-per-hour",
        _positive_int,
        24_000,
        "calls per endpoint per credential per hour (past it: 40014, the credential locked)",
    ),
    (
        "--lock-seconds",
        _non_negative_float,
        7200.0,
        "virtual seconds an hourly overrun locks the credential",
    ),
    (
        "--max-concurrent-requests",
        _non_negative_int,
        0,
        "calls of one credential in flight at once (47002 past it; 0: no limit)",
    ),
    (
        "--max-running",
        _non_negative_int,
        0,
        "phones started or starting at once (47001 past it; 0: no limit)",
    ),
    ("--creates-per-day", _non_negative_int, 200, "phones created per UTC day (44004 past it)"),
    ("--opens-per-day", _non_negative_int, 10_000, "phone starts per UTC day (43008 past it)"),
    ("--max-profiles", _non_negative_int, 200, "phones the team may hold (44002 past it)"),
    ("--balance", _non_negative_float, 100.0, "the wallet in dollars (41001 once spent)"),
    (
        "--price-per-minute",
        _non_negative_float,
        0.007,
        "dollars per running minute of an on-demand phone",
    ),
    ("--daily-cap", _non_negative_float, 1.0, "most dollars one phone is billed per UTC day"),
    (
        "--monthly-price",
        _non_negative_float,
        9.9,
        "dollars a monthly-rental phone costs, charged at creation",
    ),
    (
        "--boot-seconds",
        _non_negative_float,
        20.0,
        "virtual seconds phone/start takes (status 1, then 0)",
    ),
    (
        "--adb-ready-seconds",
        _non_negative_float,
        3.0,
        "virtual seconds from adb/setStatus to adb/getData data",
    ),
    (
        "--idle-minutes",
        _positive_float,
        30.0,
        "virtual minutes of inactivity after which energySavingMode stops a phone",
    ),
]


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = new_parser(
        prog,
        "Run the GeeLark Open API emulator: one team's cloud phones behind signed POSTs, "
        "with the vendor's limits, quotas, billing and faults, on a virtual clock.",
        port=DEFAULT_PORT,
        port_help="listen port (0: a free one)",
    )
    parser.add_argument("--app-id", default=DEFAULT_APP_ID, help="key auth: the appId")
    # Keys are never printed: their defaults are named, not shown.
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="key auth: the key signing calls  [default: the docs' worked example's key]",
    )
    parser.add_argument(
        "--token",
        default=None,
        metavar="TOKEN",
        help=f"token auth: the Bearer token  [default: {DEFAULT_TOKEN_NAME}]",
    )
    for mode in ("key", "token"):
        parser.add_argument(
            f"--no-{mode}-auth", action="store_true", default=None, help=f"switch {mode} auth off"
        )
    for flag, kind, default, says in _KNOBS:
        parser.add_argument(flag, type=kind, default=default, help=says)  # type: ignore[arg-type]
    add_choice(parser, "--plan", PLANS, "pro", "base creates one phone per addNew call (44001)")
    add_choice(
        parser,
        "--batch-envelope",
        BATCH_ENVELOPES,
        "zero",
        "a batch with failed items: code 0 (as observed), or 40006/40009",
    )
    add_clock_flags(
        parser,
        speed="virtual clock speed: boots, idle stops, windows, locks, UTC days",
        state="keep the team (phones, quotas, locks, bills, clock) in this JSON file, so an "
        "emulator started again on it is the same team; the time it was down passes on its "
        "clock (default: in memory only)",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> GeeLarkConfig:
    return config_of(
        args,
        GeeLarkConfig,
        state_file=args.state,
        app_id=None if args.no_key_auth else args.app_id,
        api_key=None if args.no_key_auth else (args.api_key or DEFAULT_API_KEY),
        token=None if args.no_token_auth else (args.token or DEFAULT_TOKEN),
    )


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        sockets = bind(args.host, [args.port])
    except ValueError as error:
        parser.error(str(error))
    from devicepool.emulator.geelark.app import StateFileError, create_app

    return run(parser, sockets, lambda: {"geelark": create_app(config)}, StateFileError)


if __name__ == "__main__":
    sys.exit(main())
