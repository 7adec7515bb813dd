#!/usr/bin/env bash
# Device-side driver mirroring experiments/gpu_check.sh under one wall budget (workplace-only).
set -u
root=$(pwd)
exec > >(tee -a "$OUT/log.txt") 2>&1
t0=$(date +%s); budget=${BUDGET_S:-570}
left() { echo $(( budget - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/jaxmarl-*.whl || exit 3
export PYTHONPATH=/tmp/site:$root/.gpusite:$root PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
vers() { python3 -c 'import sys,jax,flax,optax,chex,transformers,numpy; print(sys.version.split()[0], "jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, "chex", chex.__version__, "transformers", transformers.__version__, "numpy", numpy.__version__, jax.devices())'; }
vers
out=/tmp/gpu; mkdir -p $out
bench() {  # model limit
  local lim=$2; [ "$(left)" -lt "$lim" ] && lim=$(( $(left) - 45 ))
  [ "$lim" -lt 30 ] && { echo "== $1 skipped: budget spent"; echo "{\"bench\": \"gpu\", \"backbones\": [{\"backbone\": \"$1\", \"error\": \"not run: device budget spent\"}]}" > $out/$1.jsonl; return 9; }
  echo "== $1 (limit ${lim}s, t=$(( $(date +%s) - t0 ))s)"
  timeout $lim python3 -m omjax.bench gpu --models $1 --no-env --in-process > $out/$1.jsonl; local rc=$?
  [ $rc -ne 0 ] && echo "{\"bench\": \"gpu\", \"backbones\": [{\"backbone\": \"$1\", \"error\": \"rc $rc (124: over ${lim}s)\"}]}" > $out/$1.jsonl
  return $rc
}
bench qwen3-4b-instruct-2507 170; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
  echo "== retrying with the pinned flax/optax/chex wheels"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site2 .whl/flax-*.whl .whl/optax-*.whl .whl/chex-*.whl || exit 4
  export PYTHONPATH=/tmp/site2:$PYTHONPATH; vers
  bench qwen3-4b-instruct-2507 130
fi
bench gemma-4-e2b-it 140
bench qwen3.5-2b 120
bench gemma-4-e4b-it 150
lim=60; [ "$(left)" -lt 75 ] && lim=$(( $(left) - 15 ))
echo "== env (limit ${lim}s)"
timeout $lim python3 -m omjax.bench gpu --models qwen3-4b-instruct-2507 --env-only > $out/env.jsonl || echo '{"bench": "gpu", "env": {"error": "failed or over its limit"}}' > $out/env.jsonl
python3 -m omjax.bench gpu --report $out
echo "== done after $(( $(date +%s) - t0 )) s"
tar czf $OUT/gpu.tgz -C /tmp gpu
cat $out/gpu_check.md
