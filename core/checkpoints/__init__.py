"""Old import paths kept for checkpoint payloads only (guard.py): the agents' runtime is the agents' library
(agent_memory_runtime/), the dashboard's reads are in core.history and core.storage."""
