"""The physical scan's needles (core.privacy.physical): a register keeps a request's needles for later sweeps, so a
faster scan must compute the very heads an earlier release stored, and find a value wherever it lies in a file, across
the boundaries of the windows it computes at once and of the chunks it reads."""

from __future__ import annotations

import hashlib
import random

import pytest

from core.config import term_hash_key
from core.privacy import physical
from core.privacy.residue import Term

VALUES = ("tel 612345678", "tienda Calle 9", "clientes.C_5")


@pytest.fixture
def fixed_key(monkeypatch):
    monkeypatch.setenv("TERM_HASH_KEY", "5e" * 32)
    term_hash_key.cache_clear()
    yield
    term_hash_key.cache_clear()


def needles() -> list[dict]:
    return physical.needles_for("clientes.C1", [(f"t{i}", Term(v, "value", 1)) for i, v in enumerate(VALUES)], "0a0b")


def test_needles_are_those_an_earlier_release_stored(fixed_key):
    # computed by 975a13a's scan (six multiplications and a modulo per byte) with this key and salt
    assert [(n["ref"], n["bytes"], n["head"], n["digest"]) for n in needles()] == [
        ("t0", 13, 41982, "013e59515c72b2bc43f28ea0ca9acff2"),
        ("t1", 14, 21842, "f4fce3e2a64552f428f0d0129c6f6b13"),
        ("t2", 12, 57441, "b473f8ca7ec69d828b0f983f09fedb17"),
    ]


def test_two_thousand_heads_are_those_an_earlier_release_computed(fixed_key):
    rng = random.Random(52)
    terms = [(f"t{i}", Term(rng.randbytes(12).hex(), "value", 1)) for i in range(2000)]
    heads = ",".join(str(n["head"]) for n in physical.needles_for("clientes.C1", terms, "0a0b"))
    # sha256 of the same heads computed by 975a13a's scan
    assert hashlib.sha256(heads.encode()).hexdigest() == (
        "519be30d4f2459d020760d55bbfde6e30aa42520d74d3475e0a01f1bc7da0dcd"
    )


EDGE = physical.HEADS_AT_ONCE  # windows computed at once: a value's first byte on either side of their edge
POSITIONS = [0, EDGE - 7, EDGE - 1, EDGE, EDGE + 1, physical.READ_CHUNK - 6, physical.READ_CHUNK - 1]


@pytest.mark.parametrize("pos", POSITIONS)
def test_a_value_is_found_wherever_it_lies(fixed_key, tmp_path, pos):
    size = physical.READ_CHUNK + 3 * EDGE
    data = bytearray(random.Random(pos).randbytes(size))
    value = VALUES[1].encode()
    data[pos : pos + len(value)] = value
    path = tmp_path / "file"
    path.write_bytes(bytes(data))
    _, found = physical.scan_file(path, physical.KeyedNeedles([("r1:", "0a0b", needles())]))
    assert found == {"r1:t1"}, pos


def test_a_value_at_the_end_of_a_file_is_found(fixed_key, tmp_path):
    value = VALUES[0].encode()
    path = tmp_path / "file"
    path.write_bytes(random.Random(9).randbytes(physical.READ_CHUNK + EDGE) + value)
    assert physical.scan_file(path, physical.KeyedNeedles([("r1:", "0a0b", needles())]))[1] == {"r1:t0"}


def test_random_bytes_hold_no_value(fixed_key, tmp_path):
    path = tmp_path / "file"
    path.write_bytes(random.Random(8).randbytes(physical.READ_CHUNK + EDGE))
    assert physical.scan_file(path, physical.KeyedNeedles([("r1:", "0a0b", needles())])) == (
        physical.READ_CHUNK + EDGE,
        set(),
    )


def test_the_scan_benchmark_finds_what_the_released_scan_finds(capsys):
    """bench/bench_physical_scan.py, tiny: the scan and its baseline (the previous release's) find the same values."""
    from bench import bench_physical_scan

    bench_physical_scan.main(["--mb", "1", "--runs", "1"])
    assert "ratio (baseline / now)" in capsys.readouterr().out
