"""The subject resolver, the residue scan, coverage and the erasure on databases written by agents we did not
write (issue 10 items 1-3 and 6): the memory article's agents on stock savers, and an Agent-Server-shaped one."""

from __future__ import annotations

import re

import psycopg
import pytest
from foreign_agents import CUSTOMERS
from psycopg import sql as pgsql

from core.capture.follower import catch_up
from core.db import Database
from core.memory.store import InvalidIdentifier
from core.privacy import erasure, erasure_register, evidence, follow_up
from core.privacy import residue as res
from core.privacy import subjects as subj

DEFAULT = subj.Attribution()
BAD_IDS = ["", " C9", "C9 ", "C9.x", "C\x009", "x" * 5000, 9, None]


@pytest.fixture
def article_db(article_agents_db):
    database = Database(article_agents_db.dsn)
    yield database
    database.close()


def thread_rows(db: Database, threads) -> dict[str, int]:
    threads = sorted(threads)
    return {
        t: db.fetch_one(f"SELECT count(*) AS n FROM {t} WHERE thread_id = ANY(%s)", (threads,))["n"]
        for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    }


def raw_hits(db: Database, value: str) -> int:
    """Rows of any checkpoint table whose raw bytes hold `value`."""
    return db.fetch_one(
        """
        SELECT (SELECT count(*) FROM checkpoint_writes WHERE position(convert_to(%(v)s, 'UTF8') IN blob) > 0)
             + (SELECT count(*) FROM checkpoint_blobs WHERE position(convert_to(%(v)s, 'UTF8') IN blob) > 0)
             + (SELECT count(*) FROM checkpoints WHERE strpos(checkpoint::text, %(v)s) > 0) AS n""",
        {"v": value},
    )["n"]


def distinctive_values(foreign, customer: str) -> list[str]:
    return [v for v in foreign.declared(customer).values() if v != "T002"]


# --- resolver ----------------------------------------------------------------------------------------------


def test_every_thread_of_each_customer_is_found_with_its_source(article_agents_db, article_db):
    """Write threads by the `hilo` back-link; the read and chat threads (no link, no metadata) by the
    residue scan, with the matched term and a snippet. Look-alike ids never cross."""
    for customer in CUSTOMERS:
        subjects = subj.resolve(article_db, customer, DEFAULT)
        writes = article_agents_db.threads_of(customer, "write")
        assert subjects.by_source["store:hilo"] == writes, customer
        assert all(subjects.threads[t] == ["store:hilo"] for t in writes)
        for source in ("metadata:cliente_id", "metadata:customer_id", "metadata:user_id", "pattern:cliente-{id}-*"):
            assert subjects.by_source[source] == [], (customer, source)  # stock agents tag nothing
        residue = res.residue_scan(article_db, customer, DEFAULT, subjects)
        others = article_agents_db.threads_of(customer, "read") + article_agents_db.threads_of(customer, "chat")
        assert residue.proposed == sorted(others), customer
        assert sorted(set(subjects.thread_ids) | set(residue.proposed)) == article_agents_db.threads_of(customer)
        (chat,) = article_agents_db.threads_of(customer, "chat")
        (match,) = residue.matches_of(chat)  # "soy el cliente C9": the id as a whole token
        assert match.kind == "id" and match.term == customer and f"cliente {customer}," in match.snippet
        (read,) = article_agents_db.threads_of(customer, "read")
        assert {m.term for m in residue.matches_of(read)} >= set(distinctive_values(article_agents_db, customer))


def test_look_alike_ids_never_cross(article_agents_db, article_db):
    for customer in CUSTOMERS:
        subjects = subj.resolve(article_db, customer, DEFAULT)
        residue = res.residue_scan(article_db, customer, DEFAULT, subjects)
        mine = set(article_agents_db.threads_of(customer))
        assert set(subjects.thread_ids) | set(residue.proposed) <= mine, customer
    # C9 is a substring of C9x's values: the raw filter lets them through, the whole-token check drops them
    residue = res.residue_scan(article_db, "C9", DEFAULT)
    assert residue.candidates > len(residue.matches)


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_bad_ids_are_refused_and_nothing_changes(article_agents_db, article_db, bad):
    every = [c.thread_id for c in article_agents_db.conversations]
    before = thread_rows(article_db, every)
    assert before["checkpoints"] > 0
    with pytest.raises(InvalidIdentifier):
        subj.resolve(article_db, bad, DEFAULT)
    with pytest.raises(InvalidIdentifier):
        res.residue_scan(article_db, bad, DEFAULT)
    with pytest.raises(InvalidIdentifier):
        evidence.preview(article_db, bad, DEFAULT)
    with pytest.raises(InvalidIdentifier):
        erasure.erase(article_db, bad, operator="dpo@example.com", config=DEFAULT)
    assert article_db.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"] == 0
    assert thread_rows(article_db, every) == before


def test_agent_server_metadata_is_found_by_the_metadata_source(agent_server_db):
    db = Database(agent_server_db.dsn)
    try:
        for customer in ("C9", "C19", "C_9"):
            subjects = subj.resolve(db, customer, DEFAULT)
            assert subjects.by_source["metadata:user_id"] == agent_server_db.threads_of(customer), customer
            assert subjects.by_source["metadata:cliente_id"] == []
            assert set(subjects.thread_ids) == set(agent_server_db.threads_of(customer))
        meta = db.fetch_one("SELECT metadata FROM checkpoints LIMIT 1")["metadata"]
        assert {"user_id", "graph_id", "assistant_id", "run_id"} <= set(meta)
        cov = subj.coverage(db, DEFAULT)
        assert cov.threads == len(agent_server_db.conversations) and cov.unattributed_threads == 0
        # with user_id removed from the keys, nothing attributes the write-less threads any more
        cov = subj.coverage(db, subj.Attribution(metadata_keys=("cliente_id",)))
        assert cov.unattributed_threads == sum(1 for c in agent_server_db.conversations if c.kind != "write")
    finally:
        db.close()


def test_patterns_keep_percent_and_underscore_literal(db):
    threads = ["cliente-C_9-1", "cliente-CX9-1", "cliente-C%-1", "cliente-C9-1", "cliente-C9x-1", "cliente-C9-2"]
    for t in threads:
        db.execute(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata) "
            "VALUES (%s, '', '1', '{}', '{}')",
            (t,),
        )
    catch_up(db.dsn)  # the patterns are looked up in what the change follower keeps
    assert subj.resolve(db, "C_9", DEFAULT).by_source["pattern:cliente-{id}-*"] == ["cliente-C_9-1"]
    assert subj.resolve(db, "C%", DEFAULT).by_source["pattern:cliente-{id}-*"] == ["cliente-C%-1"]
    assert subj.resolve(db, "C9", DEFAULT).by_source["pattern:cliente-{id}-*"] == ["cliente-C9-1", "cliente-C9-2"]
    cov = subj.coverage(db, DEFAULT)
    assert cov.threads == 6 and cov.unattributed_threads == 0
    assert subj.coverage(db, subj.Attribution(thread_patterns=())).unattributed_threads == 6
    with pytest.raises(subj.AttributionConfigError):
        subj.Attribution(thread_patterns=("cliente-*",))
    with pytest.raises(subj.AttributionConfigError):
        subj.Attribution(metadata_keys=("x'; DROP TABLE store; --",))


@pytest.mark.slow  # waits out the query's 5 s statement timeout
def test_configured_query_is_read_only_and_bounded(db):
    db.execute("CREATE TABLE hilos (thread_id text, cliente_id text)")
    db.execute("INSERT INTO hilos VALUES ('conv-a', 'C9'), ('conv-b', 'C19'), ('conv-c', 'C9')")
    config = subj.Attribution(thread_query="SELECT thread_id FROM hilos WHERE cliente_id = %(id)s")
    subjects = subj.resolve(db, "C9", config)
    assert subjects.by_source["query"] == ["conv-a", "conv-c"] and subjects.errors == {}
    writing = subj.Attribution(thread_query="DELETE FROM hilos WHERE cliente_id = %(id)s RETURNING thread_id")
    subjects = subj.resolve(db, "C9", writing)
    assert "read-only" in subjects.errors["query"] and "query" not in subjects.by_source
    assert db.fetch_one("SELECT count(*) AS n FROM hilos")["n"] == 3
    slow = subj.Attribution(thread_query="SELECT thread_id FROM hilos, pg_sleep(30) WHERE cliente_id = %(id)s")
    assert "timeout" in subj.resolve(db, "C9", slow).errors["query"]
    with pytest.raises(subj.AttributionConfigError):
        subj.Attribution(thread_query="SELECT thread_id FROM hilos")


def test_coverage_on_the_article_agents(article_agents_db, article_db):
    cov = subj.coverage(article_db, DEFAULT)
    convs = article_agents_db.conversations
    assert cov.threads == len(convs)
    assert cov.unattributed_threads == sum(1 for c in convs if c.kind != "write")  # read and chat threads
    expected_bytes = article_db.fetch_one("""
        SELECT (SELECT sum(pg_column_size(checkpoint) + pg_column_size(metadata)) FROM checkpoints)
             + (SELECT coalesce(sum(octet_length(blob)), 0) FROM checkpoint_blobs)
             + (SELECT sum(octet_length(blob)) FROM checkpoint_writes) AS n""")["n"]
    assert cov.bytes == expected_bytes and 0 < cov.unattributed_bytes < cov.bytes
    assert 0 < cov.byte_share < 1 and cov.thread_share == pytest.approx(12 / 30)


# --- erasure ------------------------------------------------------------------------------------------------


def test_erasure_including_the_residue_leaves_nothing(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        mine = foreign.threads_of("C9")
        others = {c: thread_rows(db, foreign.threads_of(c)) for c in CUSTOMERS if c != "C9"}
        values = distinctive_values(foreign, "C9")
        assert all(raw_hits(db, v) > 0 for v in values)
        preview = evidence.preview(db, "C9", DEFAULT)
        assert sorted(preview.thread_ids + preview.residue_threads) == mine
        with db.connection() as conn:  # the residue evidence with its own full scan, before the erasure
            terms = [t for t in res.customer_terms(conn, "C9") if not t.common]
            (scanned,) = [
                e
                for e in evidence.run_evidence_conn(conn, [], "C9", [], DEFAULT.metadata_keys, terms)
                if e.table == "residue"
            ]
        result = erasure.erase(
            db,
            "C9",
            operator="dpo@example.com",
            config=DEFAULT,
            decisions={t: "erase" for t in preview.residue_threads},
        )
        # the erasure's "before" reuses its residue scan's candidates: the same count as a scan of its own
        assert result.counts_before["residue"] == scanned.result > 0
        assert result.status == "complete" and result.exclusions == [] and result.report is None
        assert thread_rows(db, mine) == {"checkpoints": 0, "checkpoint_blobs": 0, "checkpoint_writes": 0}
        assert all(raw_hits(db, v) == 0 for v in values)  # no payload holds what C9 declared
        assert {c: thread_rows(db, foreign.threads_of(c)) for c in others} == others  # neighbours untouched
        assert {t: s for t, s in result.sources.items()} == (
            {t: ["store:hilo"] for t in foreign.threads_of("C9", "write")}
            | {t: ["residue"] for t in preview.residue_threads}
        )
        (res_ev,) = [e for e in result.evidence if e.table == "residue"]
        # recorded with its terms by reference, never the values (issue 25); a re-check proves it through the hashes
        assert res_ev.result == 0 and "correo c9@ejemplo.es" not in res_ev.sql and ":residue_terms" in res_ev.sql
        tomb = {r["thread_id"]: r["request_id"] for r in db.fetch("SELECT * FROM core_thread_tombstones")}
        assert tomb == {t: result.request_id for t in mine}
        doc = erasure_register.evidence_document(db, result.request_id)
        assert any(e["table"] == "residue" for e in doc["request"]["evidence"])
        assert {r["thread_id"] for r in doc["request"]["residue"]} == set(preview.residue_threads)
        assert erasure_register.recheck(db, result.request_id).clean
    finally:
        db.close()


def test_leaving_a_residue_thread_is_never_plain_complete(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        preview = evidence.preview(db, "C9", DEFAULT)
        (read,) = foreign.threads_of("C9", "read")
        (chat,) = foreign.threads_of("C9", "chat")
        assert sorted(preview.residue_threads) == sorted([read, chat])
        with pytest.raises(ValueError, match="reason"):  # refused before anything is touched
            erasure.erase(db, "C9", operator="dpo", config=DEFAULT, decisions={read: ("leave", "  ")})
        assert db.fetch_one("SELECT count(*) AS n FROM core_erasure_register")["n"] == 0
        assert db.fetch_one("SELECT count(*) AS n FROM store WHERE prefix = 'clientes.C9'")["n"] == 3

        result = erasure.erase(
            db,
            "C9",
            operator="dpo",
            config=DEFAULT,
            decisions={read: ("leave", "legal hold: open claim 42"), chat: "erase"},
        )
        assert result.status == "complete" and result.exclusions  # complete, with the exclusion named
        assert result.exclusions[0]["thread_id"] == read and "open claim 42" in result.report and read in result.report
        assert thread_rows(db, [read])["checkpoint_writes"] > 0 and thread_rows(db, [chat])["checkpoints"] == 0
        row = db.fetch_one("SELECT * FROM core_erasure_register WHERE id = %s", (result.request_id,))
        assert row["exclusions"][0]["reason"] == "legal hold: open claim 42"
        doc = erasure_register.evidence_document(db, result.request_id)
        assert doc["request"]["exclusions"] == row["exclusions"]
        assert erasure_register.recheck(db, result.request_id).clean  # the left thread is excepted, by name
        frame = erasure_register.register(db)
        assert int(frame.loc[frame["id"] == result.request_id, "exclusions"].iloc[0]) == 1

        # on another customer, a residue thread nobody decided on: incomplete, and not deleted
        (c19_read,) = foreign.threads_of("C19", "read")
        result = erasure.erase(db, "C19", operator="dpo", config=DEFAULT)
        assert result.status == "incomplete" and "nobody decided" in result.report and c19_read in result.report
        assert thread_rows(db, [c19_read])["checkpoint_writes"] > 0
        assert not erasure_register.recheck(db, result.request_id).clean
    finally:
        db.close()


def test_a_value_shared_by_50_customers_is_common_and_pulls_in_nobody(article_agents):
    foreign = article_agents(shared_customers=50)
    db = Database(foreign.dsn)
    try:
        shared = [c for c in foreign.conversations if c.customer.startswith("S")]
        assert len(shared) == 50
        residue = res.residue_scan(db, "C9", DEFAULT)
        t002 = next(t for t in residue.terms if t.term == "T002")
        assert t002.common and t002.customers >= 50 and t002.threads >= 50
        assert not any(t.common for t in residue.terms if t.kind == "id")
        assert not set(residue.proposed) & {c.thread_id for c in shared}
        assert {c.thread_id for c in shared} <= set(residue.common_only)  # listed, not proposed
        before = thread_rows(db, [c.thread_id for c in shared])
        others = {c: thread_rows(db, foreign.threads_of(c)) for c in CUSTOMERS if c != "C9"}
        result = erasure.erase(
            db, "C9", operator="dpo", config=DEFAULT, decisions={t: "erase" for t in residue.proposed}
        )
        assert result.status == "complete"
        assert thread_rows(db, [c.thread_id for c in shared]) == before
        assert {c: thread_rows(db, foreign.threads_of(c)) for c in others} == others
    finally:
        db.close()


class Interrupt(BaseException):
    """What Streamlit raises from a widget call when the user clicks during a run (RerunException/StopException
    are BaseExceptions too)."""


def test_an_interrupted_erasure_is_recorded_rechecked_and_resumable(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        preview = evidence.preview(db, "C9", DEFAULT)

        def stop_after_store(p):
            if p.step == "store":
                raise Interrupt()

        with pytest.raises(Interrupt):
            erasure.erase(
                db,
                "C9",
                operator="dpo",
                config=DEFAULT,
                progress=stop_after_store,
                decisions={t: "erase" for t in preview.residue_threads},
            )
        row = db.fetch_one("SELECT * FROM core_erasure_register")
        assert row["status"] == "interrupted" and row["finished_at"] is not None
        assert row["deleted"] == {"store": 3} and row["counts_after"]["checkpoints"] > 0
        assert "resume" in row["report"]
        (check,) = erasure_register.recheck_all(db)  # not skipped
        assert check.request_id == row["id"] and not check.clean
        assert erasure.stuck_requests(db) == []
        # the hilo links are gone with the store documents, but the register kept the threads it found
        result = follow_up.resume(db, row["id"], operator="dpo", config=DEFAULT)
        assert result.status == "complete", result.report
        assert thread_rows(db, foreign.threads_of("C9")) == {
            "checkpoints": 0,
            "checkpoint_blobs": 0,
            "checkpoint_writes": 0,
        }
        assert (
            db.fetch_one("SELECT resumed_by FROM core_erasure_register WHERE id = %s", (row["id"],))["resumed_by"]
            == result.request_id
        )
        with pytest.raises(erasure.ErasureError, match="nothing to resume"):
            follow_up.resume(db, result.request_id, operator="dpo")
    finally:
        db.close()


def test_a_running_row_left_by_a_dead_process_is_stuck_and_resumable(article_agents):
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        rid = db.fetch_one(
            "INSERT INTO core_erasure_register (customer_id, namespace_prefix, operator, thread_ids) "
            "VALUES ('C9', 'clientes.C9', 'dpo', %s) RETURNING id",
            (foreign.threads_of("C9", "write"),),
            read_only=False,
        )["id"]
        assert erasure.stuck_requests(db) == [rid]
        assert [r.request_id for r in erasure_register.recheck_all(db)] == [rid]
        frame = erasure_register.register(db)
        assert bool(frame.loc[frame["id"] == rid, "resumable"].iloc[0])
        result = follow_up.resume(db, rid, operator="dpo", config=DEFAULT)
        # residue threads were never decided on for the stuck row: the resumed request says so
        assert result.status == "incomplete" and "nobody decided" in result.report
        assert thread_rows(db, foreign.threads_of("C9", "write"))["checkpoints"] == 0
    finally:
        db.close()


# The reference the scan replaced: the raw-bytes filter in SQL, one position() per (row, term).
SQL_RAW_PAIRS = """
SELECT t.term, w.thread_id FROM checkpoint_writes w
JOIN unnest(%(terms)s::text[]) AS t(term) ON position(convert_to(t.term, 'UTF8') IN w.blob) > 0
WHERE NOT (w.thread_id = ANY(%(exclude)s))
UNION
SELECT t.term, b.thread_id FROM checkpoint_blobs b
JOIN unnest(%(terms)s::text[]) AS t(term) ON position(convert_to(t.term, 'UTF8') IN b.blob) > 0
WHERE NOT (b.thread_id = ANY(%(exclude)s))
UNION
SELECT t.term, c.thread_id FROM checkpoints c
JOIN unnest(%(terms)s::text[]) AS t(term) ON strpos((c.checkpoint -> 'channel_values')::text, t.term) > 0
WHERE NOT (c.thread_id = ANY(%(exclude)s))"""


def test_the_raw_scan_finds_exactly_what_the_sql_filter_found(article_agents_db, article_db):
    """raw_scan.candidates (Aho-Corasick over each row once) against the per-(row, term) SQL it replaced,
    on the article agents' real checkpoints: every customer's id and values, non-ASCII words, JSON
    punctuation, look-alikes, `%`, `_` and a quote, with some threads excluded."""
    from core.privacy import raw_scan

    terms = {
        "C9",
        "C19",
        "C9x",
        "C_9",
        "C%",
        "recogida",
        "Vía",
        "ñ",
        '"role"',
        "'",
        "no-such-term-anywhere",
        "branch:to:model",
    }  # the last one is only in the checkpoints' inline channel values
    for customer in CUSTOMERS:
        terms |= set(article_agents_db.declared(customer).values())
    terms = sorted(terms)
    exclude = sorted(article_agents_db.threads_of("C9"))
    for excluded in ([], exclude):
        expected = {
            (r["term"], r["thread_id"]) for r in article_db.fetch(SQL_RAW_PAIRS, {"terms": terms, "exclude": excluded})
        }
        with article_db.connection() as conn:
            found = raw_scan.candidates(conn, terms, excluded)
        assert found == expected, (len(found), len(expected))
        print("raw scan pairs", len(found), "terms matched", len({t for t, _ in found}))
        assert len({term for term, _ in found}) >= 5  # the comparison is not between two empty sets
    with article_db.connection() as conn:
        assert raw_scan.candidates(conn, [], []) == set()


def test_per_customer_lookups_can_use_an_index_whatever_the_id(article_agents_db):
    """The resolver's per-customer statements, planned generically (as a pooled prepared statement is, once the
    id is a parameter): each can use an index, so they stay flat as `checkpoints` grows (at 10M they read the
    whole table: BENCHMARKS.md). Seq scans are disabled, so a plan that has no usable index still shows one."""
    with psycopg.connect(article_agents_db.dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET plan_cache_mode = force_generic_plan")

        def plan(sql: str) -> str:
            return "\n".join(r[0] for r in conn.execute(sql).fetchall())

        # on the change follower's table (migration 144), never on the agents' `checkpoints`
        for n, key in enumerate(DEFAULT.metadata_keys):
            query = pgsql.SQL(subj.SELECT_BY_METADATA).format(key=pgsql.Literal(key)).as_string(conn)
            conn.execute(f"PREPARE by_key_{n}(text) AS " + query.replace("%(id)s", "$1"))
            found = plan(f"EXPLAIN EXECUTE by_key_{n}('C1')")
            assert "core_checkpoint_shadow_subjects_idx" in found and "Seq Scan" not in found, found
            assert " on checkpoints" not in found, found
        for pattern in DEFAULT.thread_patterns:
            query = pgsql.SQL(subj.SELECT_BY_PATTERN).format(like=pgsql.Literal(subj.like_for(pattern, "C_1%")))
            found = plan("EXPLAIN " + query.as_string(conn))
            # a range on the id's literal prefix (text_pattern_ops), not a filter over every thread id
            assert "core_checkpoint_shadow_thread_pattern_idx" in found and "~>=~" in found, found
            assert "Seq Scan" not in found, found


def test_every_evidence_query_can_use_an_index(article_agents_db):
    """Each zero-count query an erasure records (exactly as recorded) can be served by an index, so the evidence
    stays flat as the tables grow (at 10M, core_thread_storage's count without one was a 150 ms scan, run twice per
    erasure). Seq scans are disabled, so a query no index can serve still shows one. Except the agents' own
    `checkpoints` and `store_vectors` by metadata value and namespace pattern: no index of ours is on them (issue
    37), and the DPO's proof reads them, not what our follower keeps; those two read the whole table."""
    database = Database(article_agents_db.dsn)
    try:
        queries = evidence.run_evidence(database, "C1", article_agents_db.threads_of("C1"))
    finally:
        database.close()
    # bounded by design, not by the data: one row per extractor, per outage episode, per sweep run; the change
    # follower's dead letters, one per change it could not apply (none on a healthy follower): their keys are text
    # lists ("prefix / key | ..."), read whole
    small = {"core_extract_watermark", "core_degradation_episodes.denials", "core_sweep_log.threads_sample"}
    assert len(queries) > 10 and small <= {q.table for q in queries}
    small.add("core_capture_dead_letters")
    with psycopg.connect(article_agents_db.dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        for q in queries:
            found = "\n".join(r[0] for r in conn.execute("EXPLAIN " + q.sql).fetchall())
            if q.table in ("checkpoints", "store_vectors"):
                assert re.search(rf"Scan .*on {q.table}\b", found), (q.table, found)  # the live table itself
            elif q.table not in small:
                assert "Seq Scan" not in found, (q.table, found)


def test_coverage_is_read_as_of_the_last_sweep_and_live_without_one(article_agents):
    """The pages read the coverage the sweep computed (at 10M the live aggregate took most of a 37.6 s Erasure page
    render); with no snapshot for the configuration in use, it is computed live."""
    from core.operations import sweep

    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        live = subj.coverage(db, DEFAULT)
        assert live.as_of is None and live.unattributed_threads == 12 and live.threads == 30
        assert sweep.run_sweep(db, trigger="manual").status == "ok"
        kept = subj.coverage(db, DEFAULT)
        assert kept.as_of is not None and (kept.threads, kept.unattributed_threads) == (30, 12)
        # a configuration the sweep did not compute is computed live
        patterns = subj.Attribution(thread_patterns=("conv-{id}-*",))
        assert subj.coverage(db, patterns).as_of is None
        # what changed since is seen at the next sweep, not before: the page says "as of"
        (chat,) = foreign.threads_of("C9", "chat")  # unattributed: no back-link, no metadata
        for table in ("checkpoint_writes", "checkpoint_blobs", "checkpoints"):
            db.execute(f"DELETE FROM {table} WHERE thread_id = %s", (chat,))
        assert (subj.coverage(db, DEFAULT).threads, subj.coverage(db, DEFAULT).unattributed_threads) == (30, 12)
        refreshed = subj.refresh_coverage(db, DEFAULT)
        assert (refreshed.threads, refreshed.unattributed_threads) == (29, 11) and refreshed.as_of >= kept.as_of
        assert subj.coverage(db, DEFAULT) == refreshed
    finally:
        db.close()


def test_a_live_coverage_is_bounded_in_time_and_says_the_sweep_will_compute_it(article_agents, monkeypatch):
    """Before any sweep, a page counts the coverage live (47 s at 10M, with gigabytes of temp space): past
    LIVE_COVERAGE_TIMEOUT_MS it gives up with a message saying so (the page shows the part as unknown), and the
    connection pool is kept (it is not a connection failure)."""
    from core.db import DatabaseUnavailable, get_pool

    monkeypatch.setattr(subj, "LIVE_COVERAGE_TIMEOUT_MS", 300)
    foreign = article_agents()
    db = Database(foreign.dsn)
    try:
        pool = get_pool(db.dsn)
        with psycopg.connect(foreign.dsn) as locker:  # a real wait the statement_timeout bounds
            locker.execute("LOCK TABLE checkpoint_writes IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(DatabaseUnavailable, match="next sweep computes it"):
                subj.coverage(db, DEFAULT)
            locker.rollback()
        assert get_pool(db.dsn) is pool
        assert subj.coverage(db, DEFAULT).threads == 30  # unblocked: counted live again
    finally:
        db.close()
