"""Nothing of ours on the agents' tables (issue 37): on a freshly migrated database, no trigger, rule, policy or
event trigger reaches `store`, `store_vectors`, `checkpoints`, `checkpoint_blobs` or `checkpoint_writes`, and
no index of ours is on them (migrations 143-144 took the last ones off)."""

from __future__ import annotations

AGENT_TABLES = "'{store,store_vectors,checkpoints,checkpoint_blobs,checkpoint_writes}'::regclass[]"


def test_no_trigger_rule_policy_or_event_trigger_of_ours_reaches_the_agents_tables(db):
    triggers = db.fetch(
        f"SELECT tgrelid::regclass::text AS t, tgname FROM pg_trigger WHERE tgrelid = ANY({AGENT_TABLES}) "
        "AND NOT tgisinternal"
    )
    assert triggers == []
    rules = db.fetch(
        f"SELECT ev_class::regclass::text AS t, rulename FROM pg_rewrite WHERE ev_class = ANY({AGENT_TABLES})"
    )
    assert rules == []
    policies = db.fetch(
        f"SELECT polrelid::regclass::text AS t, polname FROM pg_policy WHERE polrelid = ANY({AGENT_TABLES})"
    )
    assert policies == []
    assert db.fetch("SELECT evtname FROM pg_event_trigger") == []
    # and nothing of ours is reachable from a write on those tables: no function of ours is a trigger function
    assert (
        db.fetch(
            "SELECT oid::regprocedure::text AS f FROM pg_proc WHERE prorettype = 'trigger'::regtype "
            "AND proname LIKE 'core\\_%%' AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgfoid = pg_proc.oid)"
        )
        == []
    )


def test_no_index_of_ours_is_on_the_agents_tables(db):
    ours = {
        (r["tablename"], r["indexname"])
        for r in db.fetch(
            "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename IN ('store', 'store_vectors', 'checkpoints', 'checkpoint_blobs', 'checkpoint_writes') "
            "AND indexname LIKE 'core\\_%%'"
        )
    }
    assert ours == set()


def test_the_publication_carries_no_payload_blob_or_embedding(db):
    columns = {
        r["tablename"]: set(r["attnames"])
        for r in db.fetch("SELECT tablename, attnames FROM pg_publication_tables WHERE pubname = 'core_capture'")
    }
    assert columns == {
        "store": {"prefix", "key", "value", "updated_at", "expires_at"},
        "store_vectors": {"prefix", "key", "field_name"},
        "checkpoints": {"thread_id", "checkpoint_ns", "checkpoint_id", "metadata"},
        "checkpoint_blobs": {"thread_id", "checkpoint_ns", "channel", "version"},
        "checkpoint_writes": {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"},
        # the agents' own logs (migration 171), mirrored in the dashboard's own database
        "core_conversations": {
            "thread_id",
            "agent",
            "subject_root",
            "subject_id",
            "started_at",
            "last_turn_at",
            "turns",
        },
        "core_memory_writes": {"id", "written_at", "prefix", "key", "thread_id", "agent"},
    }
