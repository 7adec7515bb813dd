#!/bin/bash
# One command in two checkouts, interleaved old, new in each pass, each run timed: the same machine
# state for both sides, so their wall times compare (e.g. a commit before a change and after it).
#
#   bash experiments/lab/side_by_side.sh OLD_DIR NEW_DIR OUT PASSES 'COMMAND'
#
# COMMAND runs in each checkout under bash, with that checkout first on PYTHONPATH, this
# repository's .venv/bin first on PATH, and RUN set to a fresh folder OUT/<side>_<pass>/ (its
# stdout and stderr land there too). OUT/times gets one line per run: `<side> <pass> rc= wall_s=`.
# A first pass can warm the compile cache; later passes then time warm runs.
set -u
if [ $# -ne 5 ]; then
  echo "usage: bash experiments/lab/side_by_side.sh OLD_DIR NEW_DIR OUT PASSES 'COMMAND'" >&2
  exit 2
fi
old=$(cd "$1" && pwd) new=$(cd "$2" && pwd) out=$3 passes=$4 cmd=$5
bin=$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin
mkdir -p "$out"
: > "$out/times"
for pass in $(seq 1 "$passes"); do
  for side in old new; do
    if [ "$side" = old ]; then dir=$old; else dir=$new; fi
    run=$out/${side}_$pass
    rm -rf "$run" && mkdir -p "$run"
    t0=$(date +%s.%N)
    (cd "$dir" && PYTHONPATH="$dir" PATH="$bin:$PATH" RUN="$run" bash -c "$cmd" > "$run/stdout" 2> "$run/stderr")
    rc=$?
    echo "$side $pass rc=$rc wall_s=$(echo "$(date +%s.%N) - $t0" | bc)" >> "$out/times"
  done
done
