"""`devicepool codec-server`: `_codec_server.create_app` under uvicorn, with the key files of
`devicepool.codec`."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from devicepool.client._cli_support import fail
from devicepool.client.errors import EXIT_BAD_INPUT

DEFAULT_PORT = 8234
# The Web UI of `temporal server start-dev` and `devicepool dev` (port 8233).
DEFAULT_CORS_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")


def codec_server(
    key_files: Annotated[
        list[Path] | None,
        typer.Option(
            "--key-file",
            metavar="FILE",
            help="an encryption key file, repeatable; the first encrypts, all decode "
            "(default: $DEVICEPOOL_ENCRYPTION_KEY_FILES)",
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="address to listen on (whoever reaches it reads the history)")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="port to listen on")] = DEFAULT_PORT,
    cors_origins: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            metavar="URL",
            help="a Web UI origin the browser may call from, repeatable "
            f"(default: {', '.join(DEFAULT_CORS_ORIGINS)})",
        ),
    ] = None,
) -> None:
    """Decode encrypted payloads for the Web UI and `temporal --codec-endpoint` (opt-in encryption)."""
    import uvicorn

    from devicepool.client._codec_server import create_app
    from devicepool.codec import (
        ENV_KEY_FILES,
        EncryptionCodec,
        EncryptionKeyError,
        KeyRing,
        key_files_from_env,
    )

    files: list[str | os.PathLike[str]] = list(key_files or key_files_from_env(os.environ))
    if not files:
        raise fail(
            f"codec-server needs the encryption keys: pass --key-file or set {ENV_KEY_FILES}",
            EXIT_BAD_INPUT,
        )
    try:
        codec = EncryptionCodec(KeyRing.from_files(files))
    except EncryptionKeyError as err:
        raise fail(str(err), EXIT_BAD_INPUT) from None
    origins = list(cors_origins or DEFAULT_CORS_ORIGINS)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            raise fail(
                f"cannot listen on {host}:{port} (--host/--port): {err.strerror}", 1
            ) from None
    url = f"http://{host}:{port}"
    typer.echo(
        f"codec server on {url} (keys {', '.join(codec.keys.key_ids)}; encrypts with "
        f"{codec.keys.current}); CORS for {', '.join(origins)}\n"
        f"  Web UI:  temporal server start-dev --ui-codec-endpoint {url}, or the UI's "
        "Codec Server setting\n"
        f"  CLI:     temporal workflow show -w devicepool/NAME --codec-endpoint {url}"
    )
    uvicorn.run(
        create_app(codec, cors_origins=origins),
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
    )
