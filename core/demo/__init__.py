"""Demo data made by the real code paths (`python -m core.demo`)."""
