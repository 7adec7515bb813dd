"""One command per table and figure of the paper: `python -m experiments.paper.<name>`."""
