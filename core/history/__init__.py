"""Thread history as the dashboard reads it: the canonical SQL views over the checkpoints (views.py), their
storage formats and the SQL decoder's JSON (formats.py, payload_json.py, delta.py), tool calls, token usage and
the thread search kept from them (tool_calls.py, usage.py, thread_search.py), diffs between two checkpoints
(message_diff.py) and the degradation page's view of the replicas (replica_view.py)."""
