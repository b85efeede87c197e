"""The pgoutput decoder on real bytes captured from the embedded PostgreSQL 18 (tests/data/pgoutput_store_v1.json:
a PostgresStore put, an overwrite, a second put, a delete, a TRUNCATE and a put, proto_version 1)."""

import json
from pathlib import Path

import pytest

from core.capture import pgoutput

ROWS = [
    (lsn, bytes.fromhex(h))
    for lsn, h in json.loads((Path(__file__).parent / "data/pgoutput_store_v1.json").read_text())
]


def decoded():
    return [pgoutput.decode(b) for _, b in ROWS]


def test_kinds_in_order():
    kinds = [type(m).__name__ for m in decoded()]
    assert kinds[:4] == ["Begin", "Relation", "Insert", "Commit"]
    assert kinds.count("Begin") == kinds.count("Commit") == 6
    assert "Update" in kinds and "Delete" in kinds and "Truncate" in kinds


def test_relation_columns_and_key():
    rel = next(m for m in decoded() if isinstance(m, pgoutput.Relation))
    assert (rel.namespace, rel.name, rel.replica_identity) == ("public", "store", "d")
    assert rel.columns[:3] == ("prefix", "key", "value")
    assert rel.key_flags[:3] == (True, True, False)


def test_insert_update_delete_values():
    msgs = decoded()
    ins = next(m for m in msgs if isinstance(m, pgoutput.Insert))
    assert ins.new[:3] == ("a.b", "k1", '{"x": 1}') and ins.new[5] is None
    upd = next(m for m in msgs if isinstance(m, pgoutput.Update))
    assert upd.old is None and upd.new[:3] == ("a.b", "k1", '{"x": 2}')  # key unchanged: no old tuple
    dele = next(m for m in msgs if isinstance(m, pgoutput.Delete))
    # REPLICA IDENTITY DEFAULT: a delete carries the primary key only, every other column NULL.
    assert dele.old_kind == "K" and dele.old[:2] == ("a.b", "k1") and set(dele.old[2:]) == {None}


def test_begin_commit_lsns_match_rows():
    msgs = decoded()
    for (lsn, _), m in zip(ROWS, msgs, strict=True):
        if isinstance(m, pgoutput.Commit):
            hi, lo = lsn.split("/")
            assert m.end_lsn == (int(hi, 16) << 32) | int(lo, 16)
    begins = [m for m in msgs if isinstance(m, pgoutput.Begin)]
    commits = [m for m in msgs if isinstance(m, pgoutput.Commit)]
    assert [b.final_lsn for b in begins] == [c.commit_lsn for c in commits]


def test_truncate_and_unknown():
    t = next(m for m in decoded() if isinstance(m, pgoutput.Truncate))
    assert len(t.oids) == 1 and not t.cascade
    assert pgoutput.decode(b"Yabc") == pgoutput.Other("Y", b"abc")
    with pytest.raises(ValueError):
        pgoutput.decode(b"I\x00\x00\x00\x01X")


def test_the_fold_reads_the_shadow_only_of_documents_that_existed_before_the_batch():
    """store_keys: the documents whose core_store_shadow row the follower reads before folding a batch. One the batch
    first INSERTs had no row then (its INSERT succeeded), so it is not read; one it first overwrites or deletes is."""
    from core.capture import changes

    txns = changes.decode_batch(ROWS)  # put k1, overwrite k1, put k2, delete k1, TRUNCATE, put k3
    assert changes.store_keys(txns) == set()  # each document's first event here is its INSERT
    assert changes.store_keys(txns[1:]) == {("a.b", "k1")}  # from the overwrite on: k1 existed before
    assert changes.store_keys(txns[3:]) == {("a.b", "k1")}  # from the delete on
