"""Thread checkpoints: the dual saver, the allowlisted serializer, the fail-closed guard, replica health, and the
read side of the canonical views."""
