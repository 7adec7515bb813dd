#!/bin/bash
# seeds 0-4 in one program vs five single-seed runs of the quick-start config, same machine
cd /work/main
Q=configs/quickstart_overcooked_smollm2.yaml
log=/tmp/seedtime/times.txt
: > $log
t0=$(date +%s); uptime >> $log
.venv/bin/omjax train --config $Q --seeds 0-4 run.out_dir=/tmp/seedtime/group > /tmp/seedtime/group.log 2>&1
echo "group rc=$? wall=$(( $(date +%s) - t0 ))" >> $log; uptime >> $log
for s in 0 1 2 3 4; do
  t1=$(date +%s)
  .venv/bin/omjax train --config $Q seed=$s run.out_dir=/tmp/seedtime/single_$s > /tmp/seedtime/single_$s.log 2>&1
  echo "single $s rc=$? wall=$(( $(date +%s) - t1 ))" >> $log; uptime >> $log
done
echo "all done total=$(( $(date +%s) - t0 ))" >> $log
