"""Lab probes behind docs/results.md: `python -m experiments.lab.<name>`."""
