"""What encrypted history costs a payload: bytes added and encode+decode time.

Runs the real data converter (`devicepool.connect.data_converter_for`) on the
article's pool spec, plain and with the AES-GCM codec (`devicepool.codec`),
and prints one line per figure. No server; a few seconds.

    .venv/bin/python bench/codec_cost.py [--rounds 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from devicepool.api.loader import parse_pool
from devicepool.codec import EncryptionCodec, KeyRing
from devicepool.connect import DATA_CONVERTER, data_converter_for
from devicepool.testing import pool_manifest


async def main(rounds: int) -> None:
    pool = parse_pool(pool_manifest("tiktok-us-pool", replicas=50))
    plain = DATA_CONVERTER
    encrypted = data_converter_for(EncryptionCodec(KeyRing.from_bytes({"2026-12": os.urandom(32)})))
    sizes = [(await c.encode([pool]))[0].ByteSize() for c in (plain, encrypted)]
    print(f"payload bytes: plain {sizes[0]}, encrypted {sizes[1]} (+{sizes[1] - sizes[0]})")
    # Alternating trials, the best of each: the machine is shared, and the first
    # trial pays for warming caches.
    best = [float("inf"), float("inf")]
    for _ in range(5):
        for i, converter in enumerate((plain, encrypted)):
            start = time.perf_counter()
            for _ in range(rounds):
                await converter.decode(await converter.encode([pool]), [type(pool)])
            best[i] = min(best[i], (time.perf_counter() - start) / rounds * 1e6)
    print(
        f"encode+decode per payload: plain {best[0]:.0f} us, encrypted {best[1]:.0f} us "
        f"(+{best[1] - best[0]:.0f} us; best of 5 trials of {rounds})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5000)
    asyncio.run(main(parser.parse_args().rounds))
