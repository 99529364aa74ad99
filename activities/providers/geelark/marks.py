"""A GeeLark phone's membership as devicepool writes it: name, group, tag and remark. Pure.

`serialName` (the create's `profileName`) is the slot's mark `dvp-<pool digest>-<slot
digest>`: a create finds an earlier attempt's phone by it (GeeLark has no idempotency key).
A device id is `<phone id>.<slot digest>`. A phone an earlier build parked in the pool's
warm reserve is named `dvp-<pool digest>-reserve` (none is parked now): it is the device
`<phone id>.<RESERVE_DIGEST>`, so that its pool, the orphan sweep and a deleted pool's
release still see it and remove it.
A pool's listing is narrowed by the name's prefix `dvp-<pool digest>-`; the group
`dvp-<pool digest>` only sorts the phones for a person (who may move them: never read), the
tag `devicepool` marks the account's managed phones, and the `remark` holds the created
time, the region and the device's labels (`devicepool/1 dp.at=<epoch> dp.region=<r>
<label>=<v> ...`, percent-encoded). A phone is the pool's only if its name and its remark
both say so.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from devicepool.activities.errors import InvalidArgumentError
from devicepool.api.errors import ErrorType
from devicepool.api.names import LABEL_POOL

__all__ = [
    "MANAGED_TAG",
    "MARK_PREFIX",
    "MAX_REMARK",
    "RESERVE_DIGEST",
    "Remark",
    "device_id",
    "name_digest",
    "parse_device_id",
    "pool_group",
    "pool_prefix",
    "reserve_mark",
    "slot_digest",
    "slot_mark",
]

MARK_PREFIX = "dvp-"
MANAGED_TAG = "devicepool"
MAX_REMARK = 1500  # `remark` ≤ 1500 (phone/detail/update)
REMARK_HEAD = "devicepool/1"
RESERVE = "reserve"
_COUNT = re.compile(r"[0-9]{1,12}")
_SLOT = re.compile(r"dvp-[0-9a-f]{8}-([0-9a-f]{16})")
_PARKED = re.compile(r"dvp-[0-9a-f]{8}-reserve")
_DIGEST = re.compile(r"[0-9a-f]{16}")


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


# The device-id digest of a parked phone (no slot's: a slot's is the digest of its key).
RESERVE_DIGEST = _digest(RESERVE, 16)


def pool_group(pool: str) -> str:
    """The group every phone of `pool` is created in (12 characters)."""
    return f"{MARK_PREFIX}{_digest(pool, 8)}"


def pool_prefix(pool: str) -> str:
    """What the name of every phone of `pool` starts with."""
    return f"{pool_group(pool)}-"


def slot_mark(pool: str, idempotency_key: str) -> str:
    """The name of the phone serving the slot whose creates carry `idempotency_key`."""
    return pool_prefix(pool) + _digest(idempotency_key, 16)


def reserve_mark(pool: str) -> str:
    """The name of a phone of `pool` an earlier build kept stopped in its warm reserve."""
    return pool_prefix(pool) + RESERVE


def slot_digest(name: object) -> str | None:
    """The slot digest of a phone serving a slot (its name a slot mark), else None."""
    found = _SLOT.fullmatch(name) if isinstance(name, str) else None
    return found.group(1) if found else None


def name_digest(name: object) -> str | None:
    """The digest of the device a phone so named is: its slot's, `RESERVE_DIGEST` for one
    an earlier build parked, else None (not a device of any pool)."""
    if isinstance(name, str) and _PARKED.fullmatch(name):
        return RESERVE_DIGEST
    return slot_digest(name)


def device_id(phone_id: str, digest: str) -> str:
    return f"{phone_id}.{digest}"


def parse_device_id(value: str) -> tuple[str, str] | None:
    """(phone id, slot digest) of a device id of this adapter; None for anything else."""
    phone_id, dot, digest = value.rpartition(".")
    if not dot or not phone_id or not _DIGEST.fullmatch(digest):
        return None
    return phone_id, digest


@dataclass(frozen=True)
class Remark:
    """A managed phone's remark: when devicepool made it, where, and the device's labels."""

    created: float
    region: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def pool(self) -> str:
        return self.labels.get(LABEL_POOL, "")

    def text(self) -> str:
        own = [f"dp.at={int(self.created)}", f"dp.region={quote(self.region, safe='')}"]
        parts = [REMARK_HEAD, *own]
        parts += [f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in self.labels.items()]
        text = " ".join(parts)
        if len(text) > MAX_REMARK:
            raise InvalidArgumentError(
                ErrorType.INVALID_ARGUMENT,
                None,
                f"the device's labels do not fit a GeeLark phone's remark ({MAX_REMARK} chars)",
            )
        return text

    @classmethod
    def parse(cls, text: object) -> Remark | None:
        """The remark devicepool wrote, or None for any other (never raises: one odd phone
        must not blind a listing)."""
        if not isinstance(text, str):
            return None
        head, *tokens = text.split() or [""]
        if head != REMARK_HEAD:
            return None
        values: dict[str, str] = {}
        for token in tokens:
            key, eq, value = token.partition("=")
            if eq:
                values[unquote(key)] = unquote(value)
        at = values.pop("dp.at", "")
        region = values.pop("dp.region", "")
        if not _COUNT.fullmatch(at):
            return None
        return cls(created=float(at), region=region[:100], labels=values)
