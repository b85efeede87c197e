"""Agent Protocol servers whose own tables sit beside the agents' checkpoints and store (issue 53)."""
