"""Held-out evaluation, statistics and behavioural audits (paper §6.2-§6.4)."""
