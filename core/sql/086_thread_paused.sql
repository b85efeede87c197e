-- Threads paused by a static interrupt (issue 31): `interrupt_before` / `interrupt_after`, compiled in or given at
-- run time, stop a run without any `__interrupt__` write (langgraph pregel/_loop.py raises GraphInterrupt before
-- running the next tasks, or right after saving the checkpoint). Until this migration such a thread was `idle`.
-- What the thread's latest root checkpoint holds instead is a node scheduled next, exactly what langgraph's
-- prepare_next_tasks (pregel/_algo.py) reads to build `StateSnapshot.next`:
-- - a pull task: a `branch:to:<node>` channel that is available (its None value is inlined in the checkpoint's
--   `channel_values`; a consumed one is dropped from there at the next step) and whose version is newer than
--   `versions_seen[<node>]['branch:to:<node>']` (text order for PostgresSaver's string versions, as Python's);
-- - push tasks: `Send`s pending in `__pregel_tasks` (a blob at the channel's current version; LangChain's
--   `create_agent` routes tool calls this way), each naming its node.
-- Status `paused`: nodes scheduled next, no `__interrupt__` and no `__error__` write (those keep their statuses).
-- A run still inside a step, or one whose process died in it, looks the same from the database: the page says so.
-- `next_nodes` keeps the nodes for every status (the node that raised or called interrupt() too); '{}' finished.
-- Not read: `join:` barrier channels (add_edge([a, b], c)) and the functional API's calls.

ALTER TABLE core_thread_summary ADD COLUMN IF NOT EXISTS next_nodes text[] NOT NULL DEFAULT '{}';
ALTER TABLE core_thread_summary DROP CONSTRAINT IF EXISTS core_thread_summary_status_check;
ALTER TABLE core_thread_summary ADD CONSTRAINT core_thread_summary_status_check
    CHECK (status IN ('idle', 'paused', 'interrupted', 'error'));

-- Is channel version `v` newer than `seen` (NULL: never seen)? As langgraph compares them: numbers as numbers,
-- PostgresSaver's zero-padded strings as text in code-point order.
CREATE OR REPLACE FUNCTION core_channel_version_newer(v jsonb, seen jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN v IS NULL OR jsonb_typeof(v) = 'null' THEN false
        WHEN seen IS NULL OR jsonb_typeof(seen) = 'null' THEN true
        WHEN jsonb_typeof(v) = 'number' AND jsonb_typeof(seen) = 'number' THEN v::numeric > seen::numeric
        ELSE (v #>> '{}') COLLATE "C" > (seen #>> '{}') COLLATE "C" END
$$;
REVOKE ALL ON FUNCTION core_channel_version_newer(jsonb, jsonb) FROM PUBLIC;

-- The nodes a root checkpoint schedules next (sorted, distinct; '{}' when the run finished). `thread` and `ns`
-- locate the pending Sends' blob (one primary-key lookup; decoded only when there is one).
CREATE OR REPLACE FUNCTION core_next_nodes(thread text, ns text, checkpoint jsonb) RETURNS text[]
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT node ORDER BY node), '{}') FROM (
        SELECT substr(v.key, 11) AS node
        FROM jsonb_each(CASE jsonb_typeof(checkpoint -> 'channel_versions') WHEN 'object'
                             THEN checkpoint -> 'channel_versions' ELSE '{}' END) AS v
        WHERE v.key LIKE 'branch:to:%' AND length(v.key) > 10
          AND jsonb_typeof(checkpoint -> 'channel_values') = 'object' AND (checkpoint -> 'channel_values') ? v.key
          AND core_channel_version_newer(v.value, checkpoint #> ARRAY['versions_seen', substr(v.key, 11), v.key])
        UNION ALL
        SELECT coalesce(s.send #>> '{value,node}', s.send #>> '{value,0}')  -- Send(node, arg): [node, arg] encoded
        FROM checkpoint_blobs b
        CROSS JOIN LATERAL jsonb_path_query(core_checkpoint_payload(b.type, b.blob),
                                            'strict $.** ? (@.type == "langgraph.types.Send")') AS s(send)
        WHERE b.thread_id = thread AND b.checkpoint_ns = ns AND b.channel = '__pregel_tasks'
          AND b.version = checkpoint -> 'channel_versions' ->> '__pregel_tasks' AND b.type <> 'empty'
    ) n
    WHERE node IS NOT NULL AND node <> ''
$$;
REVOKE ALL ON FUNCTION core_next_nodes(text, text, jsonb) FROM PUBLIC;

-- Rows already extracted: their latest checkpoints read once more for the nodes scheduled next (one primary-key
-- lookup per thread); an idle one with nodes scheduled is paused.
UPDATE core_thread_summary s
SET next_nodes = n.next_nodes,
    status = CASE WHEN s.status = 'idle' AND cardinality(n.next_nodes) > 0 THEN 'paused' ELSE s.status END
FROM (SELECT c.thread_id, c.checkpoint_id, core_next_nodes(c.thread_id, '', c.checkpoint) AS next_nodes
      FROM checkpoints c JOIN core_thread_summary t
        ON t.thread_id = c.thread_id AND c.checkpoint_ns = '' AND c.checkpoint_id = t.checkpoint_id) n
WHERE n.thread_id = s.thread_id AND n.checkpoint_id = s.checkpoint_id AND cardinality(n.next_nodes) > 0;
