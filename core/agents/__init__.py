"""Agent-side code: the retail agents' tools, prompt and middleware, and the scripted model of the demo and tests."""
