"""Post-hoc (chosen after the twenty-third's result): the nineteenth's round-18 adapters against
the frozen base on every held-out range they have played, delivering episodes, an exact test
stratified by range (the hypergeometric of each range's delivering episodes, convolved).
Run from the repository root: `.venv/bin/python <this file>`."""
import json
from pathlib import Path

import numpy as np
from scipy.stats import hypergeom

R = Path("experiments/results/cpu")
RANGES = ["learning_overcooked_q_last_burn_s33", "learning_overcooked_q_last_burn_s33/confirm_seeds_10020_10039",
          "learning_overcooked_q_last_burn_t05_s34", "learning_overcooked_q_last_burn_t05_16_s35",
          "learning_overcooked_q_last_burn_t025_14_s36", "learning_overcooked_q_last_burn_realign3_12_s38"]


def delivering(path):
    rows = [json.loads(line) for line in open(path)]
    return sum(r["units"] > 0 for r in rows), len(rows), min(r["seed"] for r in rows)


pmf, obs, tot = np.array([1.0]), 0, [0, 0, 0]
for d in RANGES:
    (t, n, s0), (b, nb, _) = delivering(R / d / "per_agent_eval.jsonl"), delivering(R / d / "frozen_eval.jsonl")
    assert n == nb
    print(f"seeds {s0}-{s0 + n - 1}: trained {t}/{n}, frozen {b}/{n}")
    pmf = np.convolve(pmf, hypergeom(2 * n, t + b, n).pmf(np.arange(t + b + 1)))
    obs, tot = obs + t, [tot[0] + t, tot[1] + b, tot[2] + n]
p_two = pmf[pmf <= pmf[obs] * (1 + 1e-9)].sum()
print(f"all: trained {tot[0]}/{tot[2]}, frozen {tot[1]}/{tot[2]}; stratified exact test, two-sided p = {p_two:.4f}")
