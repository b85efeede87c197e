"""langgraph's checkpointer conformance suite (PyPI `langgraph-checkpoint-conformance`) against the
dual saver on the embedded PostgreSQL: healthy, and with a real outage (server stopped or hung)
and resync between every two capabilities, on a server of its own."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from conftest import own_embedded_server
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate

from agent_memory_runtime.dual_saver import DualCheckpointSaver
from core.migrate import migrate

DIMS = 64


def _report(report, capsys) -> None:
    with capsys.disabled():
        report.print_report()
        for cap, result in report.results.items():
            print(f"    {cap:<16} detected={result.detected} passed={result.tests_passed} failed={result.tests_failed}")


def _assert_all_base(report) -> None:
    assert report.passed_all_base(), {k: v.failures for k, v in report.results.items() if v.failures}
    for cap in ("put", "put_writes", "get_tuple", "list", "delete_thread"):
        assert report.results[cap].detected and report.results[cap].passed, cap
    assert report.results["prune"].detected and report.results["prune"].passed


def test_conformance_healthy(create_database, capsys):
    dsn = create_database()

    async def lifespan():
        yield

    @checkpointer_test(name="DualCheckpointSaver (healthy)", lifespan=lifespan)
    async def factory():
        saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5)
        try:
            yield saver
        finally:
            assert not saver.degraded
            await saver.aclose()

    report = asyncio.run(validate(factory))
    _report(report, capsys)
    _assert_all_base(report)


@pytest.fixture(scope="module")
def outage_server(tmp_path_factory):
    yield from own_embedded_server(tmp_path_factory, "conformance-outage")


@pytest.mark.slow  # outage drills between capabilities
def test_conformance_through_outages_between_capabilities(outage_server, capsys):
    base, control = outage_server
    name = f"conf_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(base, dbname=name)
    migrate(dsn, DIMS)
    saver = DualCheckpointSaver(dsn, heartbeat_interval=0.5, call_timeout=0.8, replica_id="conformance-outages")
    outages: list[dict] = []

    async def outage(n: int) -> None:
        """A real outage with a checkpoint written while degraded; back only once resynced."""
        kind = "stop" if n % 2 == 0 else "hang"
        await asyncio.to_thread(control.stop if kind == "stop" else control.hang)
        try:
            checkpoint = empty_checkpoint()
            config = {"configurable": {"thread_id": f"outage-{n}", "checkpoint_ns": ""}}
            await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {})
            assert saver.degraded
            # Read back from the buffer while PostgreSQL is down.
            got = await saver.aget_tuple({"configurable": {"thread_id": f"outage-{n}", "checkpoint_ns": ""}})
            assert got is not None and got.checkpoint["id"] == checkpoint["id"]
        finally:
            await asyncio.to_thread(control.start if kind == "stop" else control.resume)
        assert await asyncio.to_thread(saver.wait_for, "healthy", 10)
        outages.append({"kind": kind, "checkpoint_id": checkpoint["id"], "thread_id": f"outage-{n}"})

    async def lifespan():
        yield

    @checkpointer_test(name="DualCheckpointSaver (outage + resync between capabilities)", lifespan=lifespan)
    async def factory():
        assert not saver.degraded
        yield saver
        await outage(len(outages))

    async def run():
        try:
            return await validate(factory)
        finally:
            await saver.aclose()

    try:
        report = asyncio.run(run())
    finally:
        control.resume()
    _report(report, capsys)
    _assert_all_base(report)
    assert len(outages) >= 7 and {o["kind"] for o in outages} == {"stop", "hang"}
    # Every checkpoint written while degraded reached PostgreSQL.
    with psycopg.connect(dsn) as conn:
        stored = {r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints WHERE thread_id LIKE 'outage-%'")}
        reasons = [
            r[0]
            for r in conn.execute(
                "SELECT reason FROM core_degradation_episodes WHERE replica_id = 'conformance-outages' ORDER BY id"
            )
        ]
        episodes = len(reasons)
    assert stored == {o["checkpoint_id"] for o in outages}
    assert episodes == len(outages), "\n".join(f"{i}: {r}" for i, r in enumerate(reasons))
