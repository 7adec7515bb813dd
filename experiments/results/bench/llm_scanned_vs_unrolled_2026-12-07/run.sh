#!/bin/bash
# bench llm, the commit before the scanned layers (07b3a66) and this one, interleaved: old, new, old, new.
out=${OUT:-/tmp/llm_ab}; mkdir -p $out
for i in 1 2; do
  for side in old new; do
    if [ $side = old ]; then dir=/work/wt_old; else dir=/work/main; fi
    (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python -m omjax.bench llm --games overcooked > $out/${side}_$i.json 2> $out/${side}_$i.err)
    echo "$side $i done $(date +%T)" >> $out/log
  done
done
