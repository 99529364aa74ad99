"""`devicepool-bitbrowser-emulator` / `python -m devicepool.emulator.bitbrowser`.

Serves one emulated BitBrowser account to N nodes (desktop clients) from one
process: node i listens on `--port` + i (with `--port 0`, each on a free
port), and every node lists the same profiles and phones. Once all listen, one
line per node goes to stdout: `node-1 http://127.0.0.1:54345`. Processes
started with the same `--account` (and `--accounts-dir`), or on the same
`--state FILE`, share the account too: each serves its own nodes of it.
`devicepool emulator --bitbrowser ...` is this CLI.

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 for bad flags, a
port it cannot listen on (every node's socket is bound before any serves) or
a node another process of the account already serves.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devicepool.emulator._serve import bind, run
from devicepool.emulator.bitbrowser.config import (
    ACCOUNTS_DIR_ENV,
    AUTH_REFUSAL_STATUSES,
    DEFAULT_ACCOUNT,
    DEFAULT_PORT,
    PHONE_RATE_MODES,
    PHONE_RATE_SCOPES,
    BitBrowserConfig,
    default_accounts_dir,
)
from devicepool.emulator.cli import (
    _non_negative_float,
    _port,
    _positive_int,
    add_choice,
    add_clock_flags,
    config_of,
    new_parser,
)

PROG = "devicepool-bitbrowser-emulator"


def _node(value: str) -> tuple[str, int | None]:
    name, sep, port = value.partition("=")
    if not name.strip():
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME or NAME=PORT")
    return name.strip(), _port(port) if sep else None


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = new_parser(
        prog,
        "Run the BitBrowser Local API emulator: one account's browser profiles "
        "and cloud phones, served to N nodes (desktop clients) that share them.",
        port=DEFAULT_PORT,
        port_help="the first node's port; node i: +i",
    )
    parser.add_argument(
        "--nodes", type=_positive_int, default=1, help="nodes named node-1..N (one account)"
    )
    parser.add_argument(
        "--node",
        dest="named_nodes",
        action="append",
        type=_node,
        metavar="NAME[=PORT]",
        help="a node by name, on PORT or the next port; repeatable (overrides --nodes)",
    )
    parser.add_argument("--account", default=DEFAULT_ACCOUNT, help="the account's name")
    parser.add_argument(
        "--api-key",
        default=None,
        metavar="KEY",
        help="switch API auth on: x-api-key must be KEY (default: auth off)",
    )
    parser.add_argument(
        "--auth-refusal-status",
        type=int,
        choices=AUTH_REFUSAL_STATUSES,
        default=403,
        metavar="403|200",
        help="HTTP status of a missing or wrong key",
    )
    parser.add_argument(
        "--open-seconds",
        type=_non_negative_float,
        default=1.0,
        help="virtual seconds /browser/open takes to launch a browser",
    )
    parser.add_argument(
        "--close-linger-seconds",
        type=_non_negative_float,
        default=3.0,
        help="virtual seconds a closed browser's process lives on",
    )
    parser.add_argument(
        "--phone-boot-seconds",
        type=_non_negative_float,
        default=60.0,
        help="virtual seconds a phone takes to power on from off",
    )
    parser.add_argument(
        "--phone-resume-seconds",
        type=_non_negative_float,
        default=5.0,
        help="virtual seconds a suspended phone takes to open",
    )
    parser.add_argument(
        "--phone-restart-seconds",
        type=_non_negative_float,
        default=30.0,
        help="virtual seconds /phone/restart takes",
    )
    parser.add_argument(
        "--phone-shutdown-seconds",
        type=_non_negative_float,
        default=0.0,
        help="virtual seconds an accepted /phone/shutdown takes to power the phone off",
    )
    parser.add_argument(
        "--phone-requests-per-second",
        type=_positive_int,
        default=1,
        help="cloud-phone calls allowed in any second",
    )
    parser.add_argument(
        "--phone-recovers-per-month",
        type=_positive_int,
        default=60,
        help="fresh starts (/phone/profile/recover) a profile may have in a calendar month",
    )
    for flag, choices, default, says in (
        (
            "--phone-rate-limit",
            PHONE_RATE_MODES,
            "refuse",
            "a phone call past the budget: refused in the envelope, HTTP 429, or delayed",
        ),
        (
            "--phone-rate-scope",
            PHONE_RATE_SCOPES,
            "account",
            "whose budget: the account's (all nodes) or each node's",
        ),
    ):
        add_choice(parser, flag, choices, default, says)
    parser.add_argument(
        "--phone-region",
        dest="phone_regions",
        action="append",
        metavar="ID",
        help="a valid regionId (compute type); repeatable (default: any)",
    )
    add_clock_flags(
        parser,
        speed="virtual clock speed: every duration and the phone budget's second",
        state="keep the account (profiles, phones, billing, counters, clock) in this JSON file, "
        "so an emulator started again on it is the same account; browsers do not survive a "
        "restart (default: in memory only)",
    )
    parser.add_argument(
        "--accounts-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="without --state: where an account is kept while any emulator process of it "
        "runs, so that processes started with the same --account share it (default: "
        f"${ACCOUNTS_DIR_ENV}, else devicepool-bitbrowser-UID under the temp dir)",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> BitBrowserConfig:
    if args.state and args.accounts_dir:
        raise ValueError("--accounts-dir has no use with --state: the state file is the account")
    nodes = [name for name, _ in args.named_nodes or []] or [
        f"node-{i}" for i in range(1, args.nodes + 1)
    ]
    return config_of(
        args,
        BitBrowserConfig,
        nodes=nodes,
        phone_rate_mode=args.phone_rate_limit,
        state_file=args.state,
        accounts_dir=None if args.state else (args.accounts_dir or default_accounts_dir()),
    )


def node_ports(first: int, count: int, explicit: list[int | None] | None = None) -> list[int]:
    """Node i's port: its own (`--node NAME=PORT`), else `first` + i, or 0 (a free port) when
    `first` is 0."""
    given = explicit or [None] * count
    ports = [
        port if port is not None else (first + i if first else 0) for i, port in enumerate(given)
    ]
    if any(port > 65535 for port in ports):
        raise ValueError(f"{count} nodes from port {first} run past 65535")
    taken = [port for port in ports if port]
    if len(set(taken)) != len(taken):
        raise ValueError(f"two nodes on one port: {ports}")
    return ports


def main(argv: list[str] | None = None, *, prog: str = PROG) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        explicit = [port for _, port in args.named_nodes] if args.named_nodes else None
        sockets = bind(args.host, node_ports(args.port, len(config.nodes), explicit))
    except ValueError as error:
        parser.error(str(error))
    from devicepool.emulator.bitbrowser.app import StateFileError, create_apps

    return run(parser, sockets, lambda: create_apps(config), StateFileError)


if __name__ == "__main__":
    sys.exit(main())
