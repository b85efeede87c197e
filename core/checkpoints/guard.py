"""The guard's import path before the agents' library, kept for payloads only: checkpoints written before the
guard moved to `agent_memory_runtime.guard` name `core.checkpoints.guard.Risk`, and the allowlisted serializer
imports a type by the name its payload carries. Import from `agent_memory_runtime.guard` everywhere else."""

from agent_memory_runtime.guard import Risk

__all__ = ["Risk"]
