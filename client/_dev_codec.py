"""`devicepool dev --encrypt`: encrypted history on the dev stack, readable in its Web UI.

The stack gets a key of its own (``<data-dir>/secrets/encryption/dev.key``,
made once, mode 0600), its worker config names it (``encryption.keyFiles``),
its `--apply` client encrypts with it, and a fourth child process,
`devicepool codec-server`, serves it to the Web UI, which the dev server
starts with ``--ui-codec-endpoint``. A data dir once run with ``--encrypt``
holds encrypted history, so later runs on it encrypt too, with or without the
flag (without the key its pools could not be read).
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

from devicepool.client._dev_config import DEV_HOST, DevOptions

KEY_ID = "dev"


def dev_key_file(options: DevOptions) -> Path:
    return options.data_dir / "secrets" / "encryption" / f"{KEY_ID}.key"


def encryption_on(options: DevOptions) -> bool:
    """`--encrypt`, or a data dir that an earlier `--encrypt` run left a key in."""
    return options.encrypt or dev_key_file(options).is_file()


def ensure_dev_key(options: DevOptions) -> Path:
    """The stack's key file, made on first use (32 random bytes, base64, readable by the owner)."""
    path = dev_key_file(options)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(base64.b64encode(os.urandom(32)).decode() + "\n")
    return path


def codec_url(options: DevOptions) -> str:
    return f"http://{DEV_HOST}:{options.codec_port}"


def codec_command(options: DevOptions) -> list[str]:
    """`devicepool codec-server` on the stack's key, answering the stack's Web UI only."""
    return [
        sys.executable,
        "-m",
        "devicepool.client",
        "codec-server",
        "--host",
        DEV_HOST,
        "--port",
        str(options.codec_port),
        "--key-file",
        str(dev_key_file(options)),
        "--cors-origin",
        f"http://{DEV_HOST}:{options.ui_port}",
        "--cors-origin",
        f"http://localhost:{options.ui_port}",
    ]


def banner_line(options: DevOptions) -> str:
    key = dev_key_file(options)
    return (
        f"  Codec server:     {codec_url(options)} (history encrypted with key {KEY_ID!r}; "
        f"the Web UI decodes through it)\n"
        f"  For the CLI:      export DEVICEPOOL_ENCRYPTION_KEY_FILES={key}\n"
    )
