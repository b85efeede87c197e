"""Change capture: follow the agents' tables through logical decoding (pgoutput) instead of triggers."""
