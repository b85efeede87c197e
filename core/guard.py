"""The guard's old import path, kept for payloads only: checkpoints written before the guard moved to
`core.checkpoints.guard` name `core.guard.Risk` (a denied tool call's ToolMessage artifact), and the
allowlisted serializer imports a type by the name its payload carries. Import from
`core.checkpoints.guard` everywhere else."""

from core.checkpoints.guard import Risk

__all__ = ["Risk"]
