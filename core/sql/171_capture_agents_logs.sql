-- Issue 52 (A'): the agents' own logs, core_conversations and core_memory_writes, are written by agent-side code
-- (core/agents/retail.py, core/memory/store.py), so they stay in the agents' database. The change follower keeps a
-- mirror of each in the dashboard's own database (core/sql/dashboard/002_agents_logs_mirror.sql), so that our
-- statements joining them with our tables read one database. Publishing them costs the agents' writes nothing: no
-- trigger, no index, no row of ours; both tables already have a primary key (their replica identity), and a write's
-- WAL is the same whether a publication names its table or not. Every column but the generated `root` (recomputed in
-- the mirror).
ALTER PUBLICATION core_capture ADD TABLE
    core_conversations (thread_id, agent, subject_root, subject_id, started_at, last_turn_at, turns),
    core_memory_writes (id, written_at, prefix, key, thread_id, agent);
