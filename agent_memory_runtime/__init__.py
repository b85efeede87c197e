"""The agents' side of agent memory (distribution agent-memory-runtime): the dual saver (dual_saver.py) and its
parts, the fail-closed guard (guard.py), the allowlisted serializer (serde.py), the replica's metrics endpoint
(metrics.py), the replica-health writes (replica_health.py), the shared pool (pool.py) and the time records carry
(clock.py). It imports nothing of the dashboard (core, ui) and no Streamlit, plotly or pandas."""
