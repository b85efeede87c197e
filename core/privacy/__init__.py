"""Data protection: erasure, its register and evidence."""
