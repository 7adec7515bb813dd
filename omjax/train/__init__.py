"""PA-MAGRPO training: cohort advantages, the vmapped per-agent update, rollouts, checkpoints."""
