"""Thread checkpoints as the agents write them: the dual saver, the allowlisted serializer, the fail-closed guard
and replica health."""
