#!/usr/bin/env bash
# The H100 check: `python -m omjax.bench gpu` on the paper's four backbones (real shapes, random
# bf16 weights), each in its own process under a time limit, then JAX Overcooked steps/s.
# Writes <out>/gpu_check.json (one JSON object: every backbone's row and the env row) and
# <out>/gpu_check.md (a short report). A run that stops early keeps every finished backbone's
# row: the report merges whatever <out> holds, so the backbones can be run in separate calls.
#
#     bash experiments/gpu_check.sh [out_dir]        # default runs/gpu_check
#     OMJAX_GPU_CHECK_MODELS="gemma-4-e2b-it" OMJAX_GPU_CHECK_ENV=0 bash experiments/gpu_check.sh out
#
# Budget (session 24, the first GPU contact): the programs are unrolled over the layers, so their
# compile time grows with depth: for Qwen3-4B on this repo's 2-core CPU (compile only, abstract
# weights, cores shared) the 2-agent decide compiled in 65 s and the update (the CPU's lax.map form)
# in 574 s. On the H200 the environment ran but no backbone finished inside 73-170 s (the weight
# draw, since fixed, took them). Give each backbone a call of its own.
set -euo pipefail
mkdir -p "${1:-runs/gpu_check}"
out="$(cd "${1:-runs/gpu_check}" && pwd)"
per_model_s="${OMJAX_GPU_CHECK_MODEL_S:-540}"
extra=(${OMJAX_GPU_CHECK_ARGS:-})  # e.g. "--tiny" to try the script on a CPU
python="${PYTHON:-python}"
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # report the peak the programs need, not a preallocated pool
"$python" -c 'import jax; d = jax.devices()[0]; print(f"device: {d.platform} {d.device_kind} x{jax.device_count()}")'
models=(${OMJAX_GPU_CHECK_MODELS:-qwen3-4b-instruct-2507 qwen3.5-2b gemma-4-e2b-it gemma-4-e4b-it})
for m in "${models[@]}"; do
  echo "== $m (limit ${per_model_s}s)"
  if ! timeout "$per_model_s" "$python" -m omjax.bench gpu --models "$m" --no-env --in-process \
      "${extra[@]}" > "$out/$m.jsonl"; then
    echo "{\"bench\": \"gpu\", \"backbones\": [{\"backbone\": \"$m\", \"error\": \"failed or over ${per_model_s}s\"}]}" \
      > "$out/$m.jsonl"
  fi
done
if [ "${OMJAX_GPU_CHECK_ENV:-1}" != 0 ]; then
  echo "== JAX Overcooked steps/s"
  timeout 120 "$python" -m omjax.bench gpu --models qwen3-4b-instruct-2507 --env-only "${extra[@]}" > "$out/env.jsonl" || \
    echo '{"bench": "gpu", "env": {"error": "failed or over 120s"}}' > "$out/env.jsonl"
fi
"$python" -m omjax.bench gpu --report "$out"
