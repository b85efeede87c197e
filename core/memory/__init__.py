"""Cross-thread memory: the agents' PostgresStore, its TTL policy, embeddings, and the read side of the store pages."""
