#!/usr/bin/env bash
# The H100 check in two parts, each one device call of at most 6 minutes (about 14 minutes of
# device time with the two machine starts):
#
#     bash experiments/gpu_check.sh OUT a   # JAX Overcooked steps/s; one real round of Qwen3-4B on
#                                           # Asymmetric Advantages, 5 seeds (omjax.bench round)
#     bash experiments/gpu_check.sh OUT b   # one real round of Qwen3.5-2B, gemma-4-E2B, gemma-4-E4B
#     OMJAX_GPU_CHECK_TINY=1 bash experiments/gpu_check.sh OUT a   # the same steps, tiny, on a CPU
#
# Every step writes its own file under OUT as it finishes (a round's JSON is rewritten after each
# of its phases, so a step stopped by its `timeout` keeps the phases that finished), and appends
# its stderr to OUT/log.txt; a step that fails or runs out of time leaves OUT/<step>.error.json.
# At most 8 files come back from a device call: part a writes 3, part b 4.
#
# The rounds play OMJAX_GPU_CHECK_HORIZON env steps (default 40) instead of the paper's 400, so
# that the compiles and a round fit the call; `bench round` projects a Table 1 cell (100 rounds x
# 5 seeds) to the config's horizon. Policy decisions/s: the round's `collect.decisions_per_s`
# (the trainer's own path), and in part a `vs_peft`: 48 real Overcooked prompts through omjax's
# decide and through transformers + PEFT eager (both agents' adapters on one base, PEFT's
# mixed-adapter batches), Qwen3-4B shapes, random weights on both sides.
#
# What a bare CUDA image (jax 0.11.2, flax, optax, orbax, chex, transformers, tokenizers, peft)
# lacks, and how to bring it offline. omjax needs, at import of the Overcooked env,
# `jaxmarl.environments.spaces` and `.multi_agent_env` (pure Python; omjax imports them without
# jaxmarl's package __init__, so none of jaxmarl's own requirements), and at run time only the
# `.layout` files of `overcooked_ai_py` (located with find_spec, never imported); the real-shape
# rounds need a tokenizer for real prompt lengths (the SmolLM2 GGUF's, saved as a folder). Here, in
# the repository root, once:
#
#     echo /.whl/ >> .git/info/exclude
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux2014_x86_64 -d .whl jaxmarl==0.2.0                 # 250 KB, pure Python
#     src=$(python3 -c 'import importlib.util as u; print(u.find_spec("overcooked_ai_py").submodule_search_locations[0])')
#     mkdir -p .whl/site/overcooked_ai_py/data && cp -r "$src/data/layouts" .whl/site/overcooked_ai_py/data/
#     touch .whl/site/overcooked_ai_py/__init__.py                                # 184 KB of layouts
#     python3 -m omjax.bench round --save-tokenizer .whl/tokenizer                 # about 3 MB
#
# and name `.whl` in the device call's `carry`. This script installs what it finds there
# (`pip install --no-index --no-deps --target`) before the first step.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: bash experiments/gpu_check.sh OUT [a|b]" >&2
  exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
part="${2:-a}"
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
if [ -d .whl ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/omjax-site \
      .whl/*.whl || exit 1
  fi
  export PYTHONPATH="/tmp/omjax-site:$PWD/.whl/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
tokenizer=()
[ -d .whl/tokenizer ] && tokenizer=(--tokenizer .whl/tokenizer)
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # the peak the programs need, not a preallocated pool
export PYTHONUNBUFFERED=1
horizon="${OMJAX_GPU_CHECK_HORIZON:-40}"
if [ "${OMJAX_GPU_CHECK_TINY:-0}" != 0 ]; then
  tiny=(--tiny)
  seeds=1
  peft=4
else
  tiny=()
  seeds=5
  peft=48
fi
log="$out/log.txt"
"$python" -c 'import jax; d = jax.devices()[0]; print(f"device: {d.platform} {d.device_kind} x{jax.device_count()}")' \
  >> "$log" 2>&1

# step NAME LIMIT_S STDOUT_FILE CMD...: CMD under `timeout`, stdout to STDOUT_FILE (or /dev/null).
step() {
  local name=$1 limit=$2 stdout=$3
  shift 3
  echo "== $name (limit ${limit}s) $(date -u +%H:%M:%S)" | tee -a "$log"
  timeout "$limit" "$@" > "$stdout" 2>> "$log"
  local rc=$?
  if [ "$rc" != 0 ]; then
    echo "{\"step\": \"$name\", \"exit\": $rc, \"error\": \"failed, or over ${limit}s (exit 124)\"}" \
      > "$out/$name.error.json"
  fi
  echo "== $name exit $rc $(date -u +%H:%M:%S)" | tee -a "$log"
}

round() {  # round CONFIG NAME SEEDS LIMIT_S [EXTRA ARGS]
  local config=$1 name=$2 n=$3 limit=$4
  shift 4
  local horizon_args=()
  [ ${#tiny[@]} = 0 ] && horizon_args=(--horizon "$horizon")
  step "round_$name" "$limit" /dev/null "$python" -m omjax.bench round --config "configs/$config" --seeds "$n" \
    "${horizon_args[@]}" "${tiny[@]}" "${tokenizer[@]}" --out "$out/round_$name.json" "$@"
}

case "$part" in
  a)
    step env 60 "$out/env.json" "$python" -m omjax.bench gpu --env-only "${tiny[@]}"
    round overcooked_aa_qwen3-4b.yaml qwen3-4b "$seeds" 270 --vs-peft "$peft"
    ;;
  b)
    round overcooked_aa_qwen3.5-2b.yaml qwen3.5-2b 1 110
    round overcooked_aa_gemma-4-e2b.yaml gemma-4-e2b 1 110
    round overcooked_aa_gemma-4-e4b.yaml gemma-4-e4b 1 110
    ;;
  *)
    echo "gpu_check.sh: part must be a or b, got $part" >&2
    exit 2
    ;;
esac
