"""Environments: `omjax.envs.overcooked` (JAX-native Overcooked-AI)."""
