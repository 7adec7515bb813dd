"""Launch scripts: `paper` makes the paper's tables and figures, `lab` holds the probes."""
