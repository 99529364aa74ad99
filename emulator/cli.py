"""`python -m devicepool.emulator` / `devicepool emulator`: serve the BitCloudPhone emulator with uvicorn.

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 for bad flags (a
`--state` file that cannot be used included: another emulator holds it, it is
not an emulator's SQLite file, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from devicepool.emulator.config import DEFAULT_ACCOUNT, DEFAULT_API_KEY, EmulatorConfig

if TYPE_CHECKING:
    from fastapi import FastAPI

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_N = TypeVar("_N", int, float)
_C = TypeVar("_C")


PROG = "devicepool emulator"
# The help reads as every other `devicepool` command's (click's layout, typer's
# metavars): `Usage:`, the description indented, `Options:` with `[default: X]`.
_METAVARS = {
    "_port": "<int>",
    "_positive_int": "<int>",
    "_non_negative_int": "<int>",
    "_seed": "<int>",
    "Path": "<path>",
}
_HELP_WIDTH = 80
_FIRST_COLUMN = 30


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line on stderr, exit 2, worded as the other commands' usage errors.
        flag, sep, why = message.partition(": ")
        if sep and flag.startswith("argument "):
            message = f"Invalid value for '{flag.removeprefix('argument ').split('/')[0]}': {why}"
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")

    def format_help(self) -> str:
        # `-h` is added first (`new_parser`) and listed last, as click lists it.
        actions = sorted(self._actions, key=lambda a: isinstance(a, argparse._HelpAction))
        rows = [(_option_column(action), _help_column(action)) for action in actions]
        first = min(max(len(opts) for opts, _ in rows), _FIRST_COLUMN)
        lines = [f"Usage: {self.prog} [OPTIONS]", ""]
        lines += textwrap.wrap(
            self.description or "", _HELP_WIDTH - 2, initial_indent="  ", subsequent_indent="  "
        )
        lines += ["", "Options:"]
        for opts, text in rows:
            # "[default: X]" stays whole on one line, as click keeps it.
            text = text.replace("[default: ", "[default:\u00a0")
            width = _HELP_WIDTH - first - 4
            wrapped = [part.replace("\u00a0", " ") for part in textwrap.wrap(text, width)] or [""]
            if len(opts) > first:
                lines.append(f"  {opts}")
                lines += [" " * (first + 4) + part for part in wrapped]
                continue
            lines.append(f"  {opts.ljust(first)}  {wrapped[0]}")
            lines += [" " * (first + 4) + part for part in wrapped[1:]]
        return "\n".join(lines) + "\n"


def _option_column(action: argparse.Action) -> str:
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    if action.metavar:
        return f"{flags} {action.metavar}"
    kind = getattr(action.type, "__name__", "str")
    return f"{flags} {_METAVARS.get(kind, '<float>' if 'float' in kind else '<str>')}"


def _help_column(action: argparse.Action) -> str:
    if isinstance(action, argparse._HelpAction):
        return "Show this message and exit."
    text = action.help or ""
    if action.default is not None and action.default is not argparse.SUPPRESS:
        text += (
            f"  [default: {action.default:g}]"
            if isinstance(action.default, float)
            else (f"  [default: {action.default}]")
        )
    return text


def _account(value: str) -> tuple[str, list[str]]:
    name, sep, keys = value.partition("=")
    parsed = [key.strip() for key in keys.split(",")]
    if not sep or not name.strip() or not all(parsed):
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME=KEY[,KEY...]")
    return name.strip(), parsed


def _checked(
    name: str, convert: Callable[[str], _N], what: str, *bounds: tuple[Callable[[_N], bool], str]
) -> Callable[[str], _N]:
    """A flag's type: `convert` the value, else "is not `what`"; then each bound in turn,
    else what it says. `name` is the type's `__name__`, which the help's metavar follows."""

    def parse(value: str) -> _N:
        try:
            number = convert(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        for holds, says in bounds:
            if not holds(number):
                raise argparse.ArgumentTypeError(f"{value!r} {says}")
        return number

    parse.__name__ = name
    return parse


_FINITE: tuple[Callable[[float], bool], str] = (math.isfinite, "is not a finite number")
_positive_float = _checked(
    "_positive_float", float, "a number", _FINITE, (lambda n: n > 0, "must be > 0")
)
_non_negative_float = _checked(
    "_non_negative_float", float, "a number", _FINITE, (lambda n: n >= 0, "must be >= 0")
)
_positive_int = _checked("_positive_int", int, "an integer", (lambda n: n >= 1, "must be >= 1"))
_non_negative_int = _checked(
    "_non_negative_int", int, "an integer", (lambda n: n >= 0, "must be >= 0")
)
_port = _checked(
    "_port", int, "a port number", (lambda n: 0 <= n <= 65535, "is not between 0 and 65535")
)
_seed = _checked("_seed", int, "an integer")


def add_clock_flags(parser: argparse.ArgumentParser, *, speed: str, state: str) -> None:
    """`--speed` (help: `speed`), `--seed` and `--state FILE` (help: `state`), which both
    emulators take."""
    parser.add_argument("--speed", type=_positive_float, default=1.0, help=speed)
    parser.add_argument("--seed", type=_seed, default=None, help="seed for ids and faults")
    parser.add_argument("--state", type=Path, default=None, metavar="FILE", help=state)


def new_parser(
    prog: str, description: str, *, port: int, port_help: str
) -> argparse.ArgumentParser:
    """An emulator's parser, its first flags `--host` and `--port` (default `port`)."""
    parser = _Parser(prog=prog, description=description, add_help=False)
    parser.add_argument("-h", "--help", action="help", help="Show this message and exit.")
    parser.add_argument("--host", default="127.0.0.1", help="listen address")
    parser.add_argument("--port", type=_port, default=port, help=port_help)
    return parser


def add_choice(
    parser: argparse.ArgumentParser, flag: str, choices: tuple[str, ...], default: str, says: str
) -> None:
    """A flag taking one of `choices`, shown as `A|B|C`."""
    parser.add_argument(
        flag, choices=choices, default=default, metavar="|".join(choices), help=says
    )


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        PROG,
        "Run the BitCloudPhone emulator: a local provider with a virtual clock and faults.",
        port=8088,
        port_help="listen port",
    )
    parser.add_argument(
        "--account",
        dest="accounts",
        action="append",
        type=_account,
        metavar="NAME=KEY[,KEY...]",
        help=f"an account and its API keys; repeatable  [default: {DEFAULT_ACCOUNT}={DEFAULT_API_KEY}]",
    )
    parser.add_argument(
        "--provision-seconds",
        type=_non_negative_float,
        default=45.0,
        help="virtual seconds from create to ready",
    )
    parser.add_argument(
        "--terminate-seconds",
        type=_non_negative_float,
        default=5.0,
        help="virtual seconds from a terminate call to the device gone",
    )
    parser.add_argument(
        "--creates-per-minute",
        type=_positive_int,
        default=20,
        help="accepted creations per account per sliding minute",
    )
    add_clock_flags(
        parser,
        speed="virtual clock speed: every duration, the rate window included",
        state="keep devices, idempotency keys, the rate window and billing in this SQLite file "
        "(created if missing), so an emulator started again on it is the same provider; "
        "the time it was down passes on its clock (default: in memory only)",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> EmulatorConfig:
    accounts: dict[str, list[str]] = {}
    for name, keys in args.accounts or [(DEFAULT_ACCOUNT, [DEFAULT_API_KEY])]:
        merged = accounts.setdefault(name, [])
        merged.extend(key for key in keys if key not in merged)
    return config_of(args, EmulatorConfig, accounts=accounts, state_file=args.state)


def config_of(args: argparse.Namespace, config: type[_C], **given: Any) -> _C:
    """The dataclass `config` from `given` and every flag whose dest is one of its fields."""
    names = {field.name for field in dataclasses.fields(config)}  # type: ignore[arg-type]
    named = {name: value for name, value in vars(args).items() if name in names}
    return config(**{**named, **given})


def serve(app: FastAPI, host: str, port: int) -> None:
    """Serve the emulator app until SIGINT/SIGTERM, then shut down gracefully and return."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own version re-raises the signal after its graceful shutdown,
            # so the process would still die "killed by SIGTERM"; a cleanly stopped
            # emulator returns instead, and `main` exits 0.
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in _STOP_SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    from devicepool.emulator.app import StateFileError, create_app

    try:
        app = create_app(config)
    except StateFileError as error:
        parser.error(str(error))
    serve(app, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
