"""The guard's oldest import path, kept for payloads only: checkpoints written before core/ was split name
`core.guard.Risk` (a denied tool call's ToolMessage artifact), and the allowlisted serializer imports a type by the
name its payload carries. Import from `agent_memory_runtime.guard` everywhere else."""

from agent_memory_runtime.guard import Risk

__all__ = ["Risk"]
