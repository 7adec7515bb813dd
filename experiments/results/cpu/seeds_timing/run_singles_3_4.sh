#!/bin/bash
# singles 3 and 4 of the quick-start, quiet machine (learning run paused), to complete the seeds 0-4 comparison
cd /work/main
Q=configs/quickstart_overcooked_smollm2.yaml
log=/tmp/seedtime2/times.txt
: > $log
uptime >> $log
for s in 3 4; do
  t1=$(date +%s)
  .venv/bin/omjax train --config $Q seed=$s run.out_dir=/tmp/seedtime2/single_$s > /tmp/seedtime2/single_$s.log 2>&1
  echo "single $s rc=$? wall=$(( $(date +%s) - t1 ))" >> $log; uptime >> $log
done
