"""The `devicepool` command line: kubectl-like, a thin layer over `PoolClient`.

Exit codes (stable, for scripts): 0 ok; 1 a runtime failure; 2 bad input (then nothing was
started or updated). Errors go to stderr as one line (`error: ...`), never a traceback; read
commands take `-o table|json|yaml`. This module is the command table and the entry point; the
pool commands are in `_cli_pools`, the process commands (`worker`, `emulator`, `dev`) in
`_cli_processes`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

try:  # typer >= 0.22 vendors click as typer._click; its exceptions are not click's
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - older typer on real click
    from click.exceptions import ClickException, UsageError  # type: ignore[assignment]

from devicepool.client._cli_codec import codec_server
from devicepool.client._cli_connect import connect
from devicepool.client._cli_control import pause, protect, replace, resume, unprotect
from devicepool.client._cli_convert import convert
from devicepool.client._cli_cost import cost
from devicepool.client._cli_help import Command, summary
from devicepool.client._cli_leases import lease, leases, release, renew
from devicepool.client._cli_orphans import orphans
from devicepool.client._cli_pools import apply, delete, describe, devices, get, scale
from devicepool.client._cli_processes import dev, emulator, setup, version, worker
from devicepool.client._cli_upgrade import upgrade
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_RUNTIME, BadInput, DevicePoolError
from devicepool.tracing import flush as flush_traces

# `\b` keeps click from rewrapping the lines that follow it into one paragraph.
EPILOG = """\b
Temporal connection (the SDK's environment configuration):
  TEMPORAL_ADDRESS    host:port of the frontend (default 127.0.0.1:7233)
  TEMPORAL_NAMESPACE  namespace (default: default)
  TEMPORAL_PROFILE    a profile of the Temporal config file (TEMPORAL_CONFIG_FILE)

Exit codes: 0 ok, 1 a runtime failure, 2 bad input (nothing was changed); leases:
3 refused or gone, 4 not granted in time."""

app = typer.Typer(
    name="devicepool",
    help="Keep pools of cloud phones and browser profiles at their declared size, on Temporal.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # -h wherever --help works
)


def _command(func: Callable[..., Any], **settings: Any) -> None:
    """Register a command; `--help` lists it with its docstring's first sentence, whole.

    Without `short_help`, click cuts a description at ~45 characters ("..."); a docstring's
    first line may end mid-sentence.
    """
    app.command(short_help=summary(func.__doc__ or ""), cls=Command, **settings)(func)


def _print_version(value: bool) -> None:
    if value:
        version()
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the devicepool and Temporal SDK versions and exit.",
        ),
    ] = False,
) -> None:
    pass


# The command table, in the order `devicepool --help` lists it.
_command(apply)
_command(get)
_command(describe)
_command(devices)
_command(scale)
_command(delete)
_command(orphans)
_command(worker)
_command(
    emulator,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
_command(dev)
_command(codec_server, name="codec-server")
_command(setup)
_command(upgrade)
_command(convert)
_command(cost)
_command(replace)
_command(protect)
_command(unprotect)
_command(pause)
_command(resume)
_command(lease)
_command(renew)
_command(release)
_command(leases)
_command(connect)
_command(version)


# ---------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> int:
    """The console script (no `argv`): run, flush, and end the process with the exit code.

    Ending with `os._exit` is deliberate: the Temporal SDK's Rust runtime keeps
    native threads that can touch the GIL while the interpreter finalizes,
    which aborts the process (SIGABRT, exit 134) after the command already
    succeeded. Every command has finished its own cleanup by now.
    """
    if argv is not None:
        return run_cli(argv)
    code = run_cli(None)
    flush_traces()  # the spans a tracing process still holds (atexit never runs here)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_cli(argv: list[str] | None) -> int:
    """Parse and run one command; returns the exit code (usage errors: one line, exit 2)."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="devicepool", standalone_mode=False)
    except UsageError as err:
        hint = (
            f" (see `devicepool {err.ctx.info_name} --help`)" if err.ctx and err.ctx.parent else ""
        )
        sys.stderr.write(f"error: {_plain(err.format_message())}{hint}\n")
        return EXIT_BAD_INPUT
    except ClickException as err:
        sys.stderr.write(f"error: {err.format_message()}\n")
        return err.exit_code
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return 130
    except BadInput as err:  # raised outside run(), e.g. while parsing
        sys.stderr.write(f"error: {err}\n")
        return EXIT_BAD_INPUT
    except DevicePoolError as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_RUNTIME
    return result if isinstance(result, int) else 0


def _plain(message: str) -> str:
    """Typer checks option values with pydantic, whose messages read "...: Value error, X";
    the user needs X alone (`-o wide`: "'wide' is not one of 'table', 'json', 'yaml'.")."""
    return message.replace("Value error, ", "")


if __name__ == "__main__":
    sys.exit(main())
