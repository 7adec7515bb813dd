#!/bin/bash
# The quick-start at 67b37ca (before the shared-prefix update and train.remat=auto) and at HEAD,
# each once to warm the compile cache, then timed: old, new. Needs `git worktree add /work/wt_old 67b37ca`.
out=${OUT:-/tmp/qs_ab2}; mkdir -p $out; rm -f $out/times
for pass in warm timed; do
  for side in old new; do
    if [ $side = old ]; then dir=/work/wt_old; else dir=/work/main; fi
    rm -rf $out/run_${side}_$pass
    t0=$(date +%s.%N)
    (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/omjax train --config configs/quickstart_overcooked_smollm2.yaml run.out_dir=$out/run_${side}_$pass > $out/${side}_$pass.log 2>&1)
    rc=$?
    t1=$(date +%s.%N)
    echo "$side $pass rc=$rc wall_s=$(echo "$t1 - $t0" | bc)" >> $out/times
  done
done
