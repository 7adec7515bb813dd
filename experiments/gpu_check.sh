#!/usr/bin/env bash
# The H100 check: `python -m omjax.bench gpu` on the paper's four backbones (real shapes, random
# bf16 weights), each in its own process under a time limit, then JAX Overcooked steps/s.
# Writes <out>/gpu_check.json (one JSON object: every backbone's row and the env row) and
# <out>/gpu_check.md (a short report). Budget: under 8 minutes on one H100-class GPU.
#
#     bash experiments/gpu_check.sh [out_dir]        # default runs/gpu_check
set -euo pipefail
mkdir -p "${1:-runs/gpu_check}"
out="$(cd "${1:-runs/gpu_check}" && pwd)"
per_model_s="${OMJAX_GPU_CHECK_MODEL_S:-105}"
extra=(${OMJAX_GPU_CHECK_ARGS:-})  # e.g. "--tiny" to try the script on a CPU
python="${PYTHON:-python}"
cd "$(dirname "$0")/.."
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # report the peak the programs need, not a preallocated pool
"$python" -c 'import jax; d = jax.devices()[0]; print(f"device: {d.platform} {d.device_kind} x{jax.device_count()}")'
models=(qwen3-4b-instruct-2507 qwen3.5-2b gemma-4-e2b-it gemma-4-e4b-it)
for m in "${models[@]}"; do
  echo "== $m (limit ${per_model_s}s)"
  if ! timeout "$per_model_s" "$python" -m omjax.bench gpu --models "$m" --no-env --in-process \
      "${extra[@]}" > "$out/$m.jsonl"; then
    echo "{\"bench\": \"gpu\", \"backbones\": [{\"backbone\": \"$m\", \"error\": \"failed or over ${per_model_s}s\"}]}" \
      > "$out/$m.jsonl"
  fi
done
echo "== JAX Overcooked steps/s"
timeout 120 "$python" -m omjax.bench gpu --models qwen3-4b-instruct-2507 --env-only "${extra[@]}" > "$out/env.jsonl" || \
  echo '{"bench": "gpu", "env": {"error": "failed or over 120s"}}' > "$out/env.jsonl"
"$python" -m omjax.bench gpu --report "$out"
