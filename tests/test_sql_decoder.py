"""The SQL msgpack decoder (core/sql/005_msgpack_decoder.sql) against the Python reference
(core.checkpoint_json, ormsgpack with a hook that never imports), on checkpoints written by the
real agents and by a StateGraph that uses Send, Command, interrupts and rich state; every msgpack
type; corrupted blobs. All on the embedded PostgreSQL."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import math
import operator
import struct
import sys
import uuid
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Annotated, TypedDict

import numpy as np
import ormsgpack
import pydantic
import pytest
from conftest import DIMS
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from core.agents.retail import ContextoCliente, ContextoProveedor, build_agent, run_turn
from core.agents.scripted_model import ScriptedChatModel
from core.db import Database
from core.history import views
from core.history.payload_json import Undecodable, payload_json
from core.memory.embeddings import OfflineHashEmbeddings
from core.memory.store import build_store

CANARY_MODULE = "core_canary_never_imported"


def as_json(value) -> object:
    """A Python JSON value, compared as JSON means it: 1e300 and 1000...0 are the same number."""
    return from_text(json.dumps(value))


def from_text(text: str) -> object:
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def sql_payload(db: Database, blob_type: str, blob: bytes | None):
    return from_text(db.fetch_one("SELECT core_checkpoint_payload(%s, %s)::text AS j", (blob_type, blob))["j"])


# --- a graph exercising what the retail agents do not: Send, Command, interrupts, rich state ---


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Parcel:
    weight: float
    tags: list


class Order(pydantic.BaseModel):
    ref: str
    lines: list[int]
    placed: datetime


def _add(a: list, b: list) -> list:
    return a + b


class RichState(TypedDict, total=False):
    log: Annotated[list, _add]
    results: Annotated[list, operator.add]
    when: datetime
    tags: set
    frozen: frozenset
    raw: bytes
    nested: dict
    order: Order
    parcel: Parcel
    answer: str


def prepare(state: RichState) -> dict:
    return {
        "log": ["prepare"],
        "when": datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
        "tags": {"a", "b", "c"},
        "frozen": frozenset({1, 2}),
        "raw": b"\x00\x01\xfe\xff" * 10,
        "nested": {
            "level1": {"level2": [1, {"level3": (True, None, -1.5)}], "empty": {}, "list": []},
            "day": date(2026, 1, 31),
            "span": timedelta(days=2, seconds=3, microseconds=4),
            "clock": time(8, 30, tzinfo=UTC),
            "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "amount": Decimal("12.50"),
            "colour": Colour.RED,
            "path": Path("/srv/x.txt"),
            "big": 2**64 - 1,
            "small": -(2**63),
            "nan": float("nan"),
            "inf": float("-inf"),
            "tiny": 5e-324,
            "matrix": np.arange(6, dtype=np.int32).reshape(2, 3),
            "text": "ñandú 😀 \u2028",
            7: "int key",
            True: "bool key",
            None: "nil key",
        },
        "order": Order(ref="PED-1", lines=[1, 2], placed=datetime(2026, 1, 1, tzinfo=UTC)),
        "parcel": Parcel(weight=1.25, tags=["fragile"]),
    }


def fan_out(state: RichState) -> list[Send]:
    return [Send("worker", {"n": n, "at": datetime(2026, 1, 1, n, tzinfo=UTC)}) for n in range(3)]


def worker(arg: dict) -> dict:
    return {"results": [{"n": arg["n"] * 2, "at": arg["at"]}]}


def ask(state: RichState) -> Command:
    answer = interrupt({"question": "¿Confirmas el pedido?", "order": state["order"]})
    return Command(update={"answer": answer, "log": ["asked"]}, goto="finish")


def finish(state: RichState) -> dict:
    return {"log": ["finish"]}


def rich_graph(saver):
    g = StateGraph(RichState)
    g.add_node("prepare", prepare)
    g.add_node("worker", worker)
    g.add_node("ask", ask)
    g.add_node("finish", finish)
    g.add_edge(START, "prepare")
    g.add_conditional_edges("prepare", fan_out, ["worker"])
    g.add_edge("worker", "ask")
    g.add_edge("finish", END)
    return g.compile(checkpointer=saver)


@pytest.fixture(scope="module")
def ckpt_db(create_database) -> Database:
    """A database holding checkpoints of the retail agents and of the rich graph (real savers)."""
    db = Database(create_database(prefix="ckpt"))
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    saver = PostgresSaver(db.pool)
    model = ScriptedChatModel()
    cliente = build_agent("atencion-cliente", model, store=store, checkpointer=saver)
    compras = build_agent("compras", model, store=store, checkpointer=saver)
    for text in [
        "Prefiero recoger mis pedidos en la tienda Gran Vía.",
        "¿Qué preferencias tengo guardadas?",
        "¿Hay avisos sobre vaqueros?",
        "Hola, quería saber el estado de mi pedido.",
    ]:
        run_turn(cliente, ContextoCliente("C1"), "cliente-C1-1", text)
    run_turn(cliente, ContextoCliente("C_%'1"), "cliente-C_%'1-1", "Prefiero que me atendáis en catalán.")
    run_turn(compras, ContextoProveedor("P001"), "compras-P001-retraso", "aviso retraso: Los vaqueros llegan tarde")

    graph = rich_graph(PostgresSaver(db.pool, serde=JsonPlusSerializer(allowed_msgpack_modules=True)))
    config = {"configurable": {"thread_id": "rich-1"}, "metadata": {"cliente_id": "C2"}}
    first = graph.invoke({"log": ["start"]}, config)
    assert "__interrupt__" in first
    done = graph.invoke(Command(resume="sí"), config)
    assert done["answer"] == "sí" and done["log"][-1] == "finish" and len(done["results"]) == 3
    return db


def all_payload_rows(db: Database) -> list[dict]:
    return db.fetch(
        "SELECT 'write' AS src, thread_id, channel, type, blob, core_checkpoint_payload(type, blob)::text AS j "
        "FROM checkpoint_writes "
        "UNION ALL SELECT 'blob', thread_id, channel, type, blob, core_checkpoint_payload(type, blob)::text "
        "FROM checkpoint_blobs"
    )


def _types_in(value, found: set) -> set:
    if isinstance(value, dict):
        if isinstance(value.get("type"), str) and "value" in value:
            found.add(value["type"])
        for v in value.values():
            _types_in(v, found)
    elif isinstance(value, list):
        for v in value:
            _types_in(v, found)
    return found


def test_parity_with_python_reference_on_every_blob_and_write(ckpt_db):
    rows = all_payload_rows(ckpt_db)
    assert len(rows) > 100
    mismatches = []
    for r in rows:
        expected = as_json(payload_json(r["type"], r["blob"]))
        if from_text(r["j"]) != expected:
            mismatches.append((r["src"], r["thread_id"], r["channel"], r["j"][:200]))
    assert mismatches == [], f"{len(mismatches)} of {len(rows)} differ: {mismatches[:3]}"
    assert not any('"undecodable"' in r["j"] for r in rows)
    # The rows cover what the issue names: messages with tool calls, Send, interrupts, rich state.
    types = set()
    for r in rows:
        _types_in(json.loads(r["j"]), types)
    expected_types = {
        "langchain_core.messages.human.HumanMessage",
        "langchain_core.messages.ai.AIMessage",
        "langchain_core.messages.tool.ToolMessage",
        "langgraph.types.Send",
        "langgraph.types.Interrupt",
        "datetime.datetime",
        "builtins.set",
        "builtins.frozenset",
        "bytes",
        "datetime.date",
        "datetime.timedelta",
        "datetime.time",
        "datetime.timezone",
        "uuid.UUID",
        "decimal.Decimal",
        "test_sql_decoder.Colour",
        "pathlib.PosixPath",
        "numpy.ndarray",
        "test_sql_decoder.Order",
        "test_sql_decoder.Parcel",
    }
    assert expected_types <= types, expected_types - types
    assert {r["type"] for r in rows} >= {"msgpack", "null"}


def test_rich_state_decodes_to_readable_json(ckpt_db):
    values = ckpt_db.fetch_one(
        "SELECT channel_values FROM core_checkpoints_view WHERE thread_id = 'rich-1' ORDER BY step DESC LIMIT 1"
    )["channel_values"]
    assert values["when"] == {
        "type": "datetime.datetime",
        "value": "2026-03-04T05:06:07.890123+00:00",
        "method": "fromisoformat",
    }
    assert values["tags"]["type"] == "builtins.set" and sorted(values["tags"]["value"]) == ["a", "b", "c"]
    assert values["raw"] == {"type": "bytes", "value": base64.b64encode(b"\x00\x01\xfe\xff" * 10).decode()}
    nested = values["nested"]
    assert nested["big"] == 2**64 - 1 and nested["small"] == -(2**63)
    assert nested["nan"] == "NaN" and nested["inf"] == "-Infinity" and nested["tiny"] == 5e-324
    assert nested["7"] == "int key" and nested["true"] == "bool key" and nested["null"] == "nil key"
    assert nested["level1"]["level2"][1]["level3"] == [True, None, -1.5]
    assert nested["id"] == {"type": "uuid.UUID", "value": "12345678123456781234567812345678"}
    assert values["order"]["type"] == "test_sql_decoder.Order" and values["order"]["value"]["ref"] == "PED-1"
    assert values["answer"] == "sí" and values["log"] == ["start", "prepare", "asked", "finish"]
    sends = ckpt_db.fetch(
        "SELECT payload FROM core_checkpoint_writes_view WHERE thread_id = 'rich-1' AND channel = '__pregel_tasks'"
    )
    assert sorted(s["payload"]["value"][1]["n"] for s in sends) == [0, 1, 2]
    assert all(s["payload"]["value"][0] == "worker" for s in sends)
    interrupts = ckpt_db.fetch(
        "SELECT payload FROM core_checkpoint_writes_view WHERE thread_id = 'rich-1' AND channel = '__interrupt__'"
    )
    assert interrupts and interrupts[0]["payload"][0]["type"] == "langgraph.types.Interrupt"
    assert interrupts[0]["payload"][0]["value"]["value"]["question"] == "¿Confirmas el pedido?"


def test_message_columns_match_the_reference(ckpt_db):
    rows = ckpt_db.fetch(
        "SELECT w.type, w.blob, v.message_kind, v.tool_name, v.tool_calls "
        "FROM checkpoint_writes w JOIN core_checkpoint_writes_view v USING "
        "(thread_id, checkpoint_ns, checkpoint_id, task_id, idx) WHERE w.channel = 'messages'"
    )
    seen = set()
    for r in rows:
        ref = payload_json(r["type"], r["blob"])
        msgs = [m["value"] if "value" in m else m for m in (ref if isinstance(ref, list) else [ref])]
        kinds = [m.get("type") or {"user": "human", "assistant": "ai"}[m["role"]] for m in msgs]
        calls = [c for m in msgs for c in (m.get("tool_calls") or [])]
        names = [m["name"] for m in msgs if kinds[msgs.index(m)] == "tool"] + [c["name"] for c in calls]
        assert r["message_kind"] == ",".join(kinds)
        assert (r["tool_calls"] or []) == calls
        assert (r["tool_name"] or "") == ",".join(names)
        seen.update(kinds)
    assert seen == {"human", "ai", "tool"}
    tools = {
        r["tool_name"] for r in ckpt_db.fetch("SELECT tool_name FROM core_checkpoint_messages_view WHERE kind = 'tool'")
    }
    assert {"recordar_preferencia", "preferencias", "avisos_proveedor", "publicar_aviso"} <= tools


def test_sql_path_never_imports_or_calls_what_a_payload_names(ckpt_db, tmp_path):
    marker = tmp_path / "executed"
    evil = [
        ormsgpack.Ext(0, ormsgpack.packb([CANARY_MODULE, "boom", "x"])),
        ormsgpack.Ext(1, ormsgpack.packb(["os", "system", [f"touch {marker}"]])),
        ormsgpack.Ext(3, ormsgpack.packb(["builtins", "eval", "__import__('os')", "__call__"])),
    ]
    blob = ormsgpack.packb(evil)
    decoded = sql_payload(ckpt_db, "msgpack", blob)
    assert decoded == as_json(
        [
            {"type": f"{CANARY_MODULE}.boom", "value": "x", "refused": True},
            {"type": "os.system", "value": [f"touch {marker}"], "refused": True},
            {"type": "builtins.eval", "value": "__import__('os')", "method": "__call__", "refused": True},
        ]
    )
    assert as_json(payload_json("msgpack", blob)) == decoded
    assert CANARY_MODULE not in sys.modules and not marker.exists()


# --- every msgpack type, packed by ormsgpack (or by hand where ormsgpack never writes it) ---

EDGE_VALUES = [
    None,
    True,
    False,
    0,
    1,
    127,
    128,
    255,
    256,
    65535,
    65536,
    2**32 - 1,
    2**32,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -1,
    -32,
    -33,
    -128,
    -129,
    -32768,
    -32769,
    -(2**31),
    -(2**31) - 1,
    -(2**63),
    0.0,
    -0.0,
    1.5,
    0.1,
    -2.5e-7,
    1e300,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "",
    "a" * 31,
    "b" * 32,
    "c" * 255,
    "d" * 256,
    "é" * 40000,
    "e" * 70000,
    '\u2028 " \\ / \t \n 😀',
    b"",
    b"\x00",
    b"\xff" * 255,
    b"\x01" * 256,
    b"z" * 70000,
    [],
    [1],
    list(range(15)),
    list(range(16)),
    list(range(65535)),
    list(range(65536)),
    {},
    {"k": 1},
    {str(i): i for i in range(15)},
    {str(i): i for i in range(16)},
    {str(i): i for i in range(65536)},
    {1: "one", -5: "minus", 2**64 - 1: "max", False: "f0", None: "n", 1.5: "f"},
    {"deep": [[[[[[[[[[{"x": [None]}]]]]]]]]]]},
]
EXTS = [
    (code, b"\x07" * size)
    for code, size in [  # fixext 1..16, ext 8/16/32, negative and max codes
        (42, 1),
        (42, 2),
        (42, 4),
        (42, 8),
        (42, 16),
        (100, 3),
        (100, 300),
        (100, 70000),
        (127, 0),
    ]
]
FLOAT32 = [0.1, -2.5, 3.4028234663852886e38, 1e-45, 1.17549435e-38, float("inf"), float("-inf"), float("nan"), -0.0]


def packed_edge_cases() -> list[tuple[str, bytes]]:
    cases = [(repr(v)[:40], ormsgpack.packb(v, option=ormsgpack.OPT_NON_STR_KEYS)) for v in EDGE_VALUES]
    cases += [(f"ext {code} len {len(data)}", ormsgpack.packb(ormsgpack.Ext(code, data))) for code, data in EXTS]
    # negative ext codes (msgpack reserves them; ormsgpack reads but never writes them)
    cases += [("ext -1 fixext 4", b"\xd6\xff" + b"\x01" * 4), ("ext -128 ext8", b"\xc7\x03\x80abc")]
    cases += [(f"float32 {f}", b"\xca" + struct.pack(">f", f)) for f in FLOAT32]
    cases.append(
        (
            "ext in ext",
            ormsgpack.packb(
                ormsgpack.Ext(
                    2,
                    ormsgpack.packb(
                        ["m", "Outer", {"inner": ormsgpack.Ext(0, ormsgpack.packb(["m", "Inner", b"\x01"]))}]
                    ),
                )
            ),
        )
    )
    cases.append(("numpy ext 6", ormsgpack.packb(ormsgpack.Ext(6, ormsgpack.packb(["<f8", [2], "C", b"\x00" * 16])))))
    cases.append(("delta ext 7", ormsgpack.packb(ormsgpack.Ext(7, ormsgpack.packb({"a": [1]})))))
    # array 16/32 and map 32 headers with few items, and str/bin widths bigger than needed: valid msgpack
    cases.append(("array16 short", b"\xdc\x00\x02\x01\x02"))
    cases.append(("array32 short", b"\xdd\x00\x00\x00\x01\xc0"))
    cases.append(("map16 short", b"\xde\x00\x01\xa1k\x05"))
    cases.append(("map32 short", b"\xdf\x00\x00\x00\x01\xa1k\x05"))
    cases.append(("str16 short", b"\xda\x00\x02hi"))
    cases.append(("str32 short", b"\xdb\x00\x00\x00\x02hi"))
    cases.append(("bin32 short", b"\xc6\x00\x00\x00\x01\xaa"))
    cases.append(("uint8 in int8 range", b"\xcc\x05"))
    cases.append(("int64 positive", b"\xd3" + struct.pack(">q", 12345)))
    return cases


def test_every_msgpack_type_matches_the_reference(ckpt_db):
    cases = packed_edge_cases()
    rows = ckpt_db.fetch(
        "SELECT n, core_checkpoint_payload('msgpack', b)::text AS j FROM unnest(%s::bytea[]) "
        "WITH ORDINALITY AS t(b, n) ORDER BY n",
        ([c[1] for c in cases],),
    )
    assert len(rows) == len(cases)
    for (label, blob), row in zip(cases, rows, strict=True):
        assert "undecodable" not in row["j"], (label, row["j"][:200])
        assert from_text(row["j"]) == as_json(payload_json("msgpack", blob)), label


def test_edge_values_exact(ckpt_db):
    def q(v):
        return sql_payload(ckpt_db, "msgpack", ormsgpack.packb(v, option=ormsgpack.OPT_NON_STR_KEYS))

    assert q(2**64 - 1) == 18446744073709551615 and q(-(2**63)) == -9223372036854775808
    assert q(-32) == -32 and q(-33) == -33 and q(0.1) == Decimal("0.1") and q(1e300) == Decimal("1e300")
    assert q(b"\x00\xff") == {"type": "bytes", "value": "AP8="}
    assert q(float("nan")) == "NaN" and q(float("inf")) == "Infinity"
    assert q({1: "a", None: "b"}) == {"1": "a", "null": "b"}
    f32 = sql_payload(ckpt_db, "msgpack", b"\xca" + struct.pack(">f", 0.1))
    assert f32 == Decimal(repr(struct.unpack(">f", struct.pack(">f", 0.1))[0]))
    assert sql_payload(ckpt_db, "msgpack", ormsgpack.packb(ormsgpack.Ext(42, b"\x01\x02"))) == {
        "type": "msgpack.ext",
        "code": 42,
        "value": "AQI=",
    }


def test_other_blob_types(ckpt_db):
    assert sql_payload(ckpt_db, "null", b"") is None
    assert sql_payload(ckpt_db, "empty", None) == {"type": "empty", "value": None}
    assert sql_payload(ckpt_db, "bytes", b"\x00\x01") == {"type": "bytes", "value": "AAE="}
    lc = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain", "schema", "messages", "HumanMessage"],
        "kwargs": {"content": "hola"},
    }
    assert sql_payload(ckpt_db, "json", json.dumps(lc).encode()) == as_json(lc)
    kinds = ckpt_db.fetch_one("SELECT core_checkpoint_messages(%s::jsonb) AS m", (json.dumps([lc]),))["m"]
    assert kinds == [{"kind": "human", "content": "hola"}]
    pickled = sql_payload(ckpt_db, "pickle", b"\x80\x04K\x01.")
    # never unpickled: refused, like a constructor outside the allowlist (migration 065)
    assert pickled == {"type": "pickle", "refused": True, "blob_type": "pickle", "size": 5}
    assert sql_payload(ckpt_db, "avro", b"x")["undecodable"] == "blob type avro is never decoded here"


CORRUPT = {
    "truncated": lambda b: b[: len(b) // 2],
    "invalid byte 0xc1": lambda b: b"\xc1" + b[1:],
    "trailing bytes": lambda b: b + b"\x00",
    "invalid utf-8": lambda b: b"\xa2\xff\xfe",
    "NUL in a string": lambda b: b"\xa2a\x00",
    "container as map key": lambda b: b"\x81\x90\x01",
    "bad ext payload": lambda b: b"\xd4\x00\x01",
    "huge array header": lambda b: b"\xdd\xff\xff\xff\xff\x01",
    "empty": lambda b: b"",
}


@pytest.mark.parametrize("how", list(CORRUPT))
def test_corrupt_blob_gives_a_marker_never_an_error(ckpt_db, how):
    good = ormsgpack.packb({"messages": ["hola", 1, [2.5]]})
    decoded = sql_payload(ckpt_db, "msgpack", CORRUPT[how](good))
    assert set(decoded) == {"undecodable", "blob_type", "size"} and decoded["undecodable"], decoded
    if how == "trailing bytes":
        # ormsgpack (so langgraph) ignores trailing bytes; the SQL decoder is stricter and says so
        assert "trailing bytes" in decoded["undecodable"]
    else:
        with pytest.raises(Undecodable):
            payload_json("msgpack", CORRUPT[how](good))


def test_corrupted_blob_shows_marker_and_the_rest_of_the_history(ckpt_db, create_database):
    db = Database(create_database(prefix="corrupt"))
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        rows = ckpt_db.fetch(f"SELECT * FROM {table} WHERE thread_id = 'cliente-C1-1'")
        cols = list(rows[0])
        with db.connection() as conn, conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                [tuple(_jsonb(r[c]) for c in cols) for r in rows],
            )
    target = db.fetch_one(
        "SELECT checkpoint_id, task_id, idx FROM checkpoint_writes WHERE thread_id = 'cliente-C1-1' "
        "AND channel = 'messages' AND type = 'msgpack' ORDER BY checkpoint_id DESC LIMIT 1"
    )
    db.execute(
        "UPDATE checkpoint_writes SET blob = substring(blob FROM 1 FOR 7) WHERE thread_id = 'cliente-C1-1' "
        "AND checkpoint_id = %(checkpoint_id)s AND task_id = %(task_id)s AND idx = %(idx)s",
        target,
    )
    blob_target = db.fetch_one(
        "SELECT channel, version FROM checkpoint_blobs WHERE thread_id = 'cliente-C1-1' "
        "AND channel = 'messages' ORDER BY version DESC LIMIT 1"
    )
    db.execute(
        "UPDATE checkpoint_blobs SET blob = '\\xc1'::bytea WHERE thread_id = 'cliente-C1-1' "
        "AND channel = %(channel)s AND version = %(version)s",
        blob_target,
    )

    writes = views.step_writes(db, "cliente-C1-1")
    expected = ckpt_db.fetch_one("SELECT count(*) AS n FROM checkpoint_writes WHERE thread_id = 'cliente-C1-1'")["n"]
    assert len(writes) == expected
    bad = writes[writes["undecodable"].notna()]
    assert len(bad) == 1 and bad.iloc[0]["checkpoint_id"] == target["checkpoint_id"]
    assert "truncated" in bad.iloc[0]["undecodable"]
    good = writes[writes["undecodable"].isna()]
    assert (good["message_kind"].dropna() != "").all() and {"human", "ai", "tool"} <= set(good["message_kind"].dropna())

    timeline = views.thread_timeline(db, "cliente-C1-1")
    assert (
        len(timeline)
        == ckpt_db.fetch_one("SELECT count(*) AS n FROM checkpoints WHERE thread_id = 'cliente-C1-1'")["n"]
    )
    assert timeline["undecodable_writes"].sum() == 1
    latest = db.fetch_one(
        "SELECT channel_values -> 'messages' AS m FROM core_checkpoints_view "
        "WHERE thread_id = 'cliente-C1-1' ORDER BY step DESC LIMIT 1"
    )["m"]
    assert "invalid msgpack byte 0xc1" in latest["undecodable"]
    assert db.fetch_one("SELECT count(*) AS n FROM core_checkpoint_messages_view")["n"] > 0


def _jsonb(value):
    from psycopg.types.json import Jsonb

    return Jsonb(value) if isinstance(value, (dict, list)) else value


def test_floats_print_round_trip(ckpt_db):
    # the decoder prints floats with PostgreSQL's shortest round-trip output (extra_float_digits > 0)
    assert ckpt_db.fetch_one("SHOW extra_float_digits")["extra_float_digits"] != "0"
    for f in (0.1, 1 / 3, 2.0**-1074, 123456789.123456789, -1e-300):
        got = sql_payload(ckpt_db, "msgpack", ormsgpack.packb(f))
        assert float(got) == f and not math.isnan(float(got))


def test_a_json_row_without_bytes_is_undecodable_as_a_msgpack_one_is():
    # a TypeError here would escape the callers that turn Undecodable into the undecodable marker
    for blob_type in ("msgpack", "json"):
        with pytest.raises(Undecodable, match=f"{blob_type} blob without bytes"):
            payload_json(blob_type, None)
