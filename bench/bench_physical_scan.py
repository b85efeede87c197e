"""The erasure's physical scan (core.privacy.physical): how fast the sweep reads relation files and WAL segments for an
erased customer's values, known only by their keyed needles.

    python -m bench.bench_physical_scan            # 64 MB, 40 needles, 5 runs
    python -m bench.bench_physical_scan --mb 8     # smaller

Data (deterministic: fixed seed and key, nothing depends on when it runs): random bytes with the needles' values
written at fixed places, half of every 8 kB page zero as in a heap file's free space. Measured, median of --runs, each
against its baseline in the same run: `physical.scan_file` (the keyed head read two bytes at a time from three
64K-entry tables, 64K windows at once, a flag per head value) against the scan of 975a13a written out here (six
multiplications and a modulo per byte over 4 MB at once, then np.isin), which must find the same values.
Ratio = baseline s / s (above 1: faster than the baseline).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TERM_HASH_KEY", "5e" * 32)  # a fixed key: the same heads every run

from core.config import term_hash_key  # noqa: E402
from core.privacy import physical  # noqa: E402
from core.privacy.residue import Term  # noqa: E402

PAGE = 8192


class ReleasedNeedles(physical.KeyedNeedles):
    """975a13a's search, the baseline: every head computed with six multiplications and a modulo, then np.isin."""

    def found(self, data: bytes) -> set[str]:
        out: set[str] = set()
        if not self.by_head:
            return out
        key = term_hash_key()
        coefficients = [
            int.from_bytes(hashlib.blake2b(bytes([j]), key=key, person=b"physical-coef", digest_size=4).digest())
            % physical.PRIME
            for j in range(physical.WINDOW)
        ]
        arr = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
        n = len(arr) - physical.WINDOW + 1
        if n <= 0:
            return out
        acc = np.zeros(n, dtype=np.int64)
        for j, a in enumerate(coefficients):
            acc += arr[j : j + n] * a
        heads = (acc % physical.PRIME) & physical.HEAD_BITS
        for pos in np.nonzero(np.isin(heads, np.array(sorted(self.by_head), dtype=np.int64)))[0]:
            for label, salt, size, digest in self.by_head[int(heads[pos])]:
                if label not in out and physical.needle_digest(salt, data[pos : pos + size]) == digest:
                    out.add(label)
        return out


def build(path: Path, mb: int, values: list[str]) -> None:
    rng = random.Random(52)
    data = bytearray()
    for _ in range(mb * (1 << 20) // PAGE):
        data += rng.randbytes(PAGE // 2) + bytes(PAGE // 2)
    step = len(data) // (len(values) + 1)
    for i, value in enumerate(values[: len(values) // 2], 1):  # half of the values are in the file
        data[i * step : i * step + len(value)] = value.encode()
    path.write_bytes(bytes(data))


def timed(runs: int, scan) -> tuple[float, set[str]]:
    seconds, found = [], set()
    for _ in range(runs):
        start = time.perf_counter()
        found = scan()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--needles", type=int, default=40)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    values = [f"tienda Calle {n:07d}" for n in range(args.needles)]
    needles = physical.needles_for("clientes.C1", [(f"t{i}", Term(v, "value", 1)) for i, v in enumerate(values)], "0a")
    groups = [("r1:", "0a", needles)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "relation"
        build(path, args.mb, values)
        now, found = timed(args.runs, lambda: physical.scan_file(path, physical.KeyedNeedles(groups))[1])
        base, base_found = timed(args.runs, lambda: physical.scan_file(path, ReleasedNeedles(groups))[1])
    assert found == base_found and len(found) == args.needles // 2, (sorted(found), sorted(base_found))
    print(f"physical scan of {args.mb} MB, {args.needles} needles ({len(found)} found), median of {args.runs}:")
    print(f"  scan_file          {now:7.3f} s  {args.mb / now:6.0f} MB/s")
    print(f"  baseline 975a13a   {base:7.3f} s  {args.mb / base:6.0f} MB/s")
    print(f"  ratio (baseline / now): {base / now:.2f}")


if __name__ == "__main__":
    main()
