"""Diagnostic: step-0 state digests of Harvest engine seeds, sequential in one isolated child or
one fork per seed (mode), in a child whose environment carries a pad of PAD bytes."""
import sys
from omjax.envs.meltingpot.isolated import run_isolated
code = r"""
import hashlib, json, os, sys, pickle
import numpy as np
from omjax.envs.meltingpot import adapter
mode, seeds, out = sys.argv[1], [int(s) for s in sys.argv[2].split(',')], sys.argv[3]
env = adapter.CommonsHarvest()
def digest(s):
    m = hashlib.sha1()
    for a in (s.pos, s.ori, s.apples):
        m.update(np.ascontiguousarray(a).tobytes())
    return m.hexdigest()[:10]
res = []
for seed in seeds:
    if mode == 'seq':
        res.append(digest(env.reset(seed)))
    else:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r); os.write(w, digest(env.reset(seed)).encode()); os._exit(0)
        os.close(w); res.append(os.read(r, 100).decode()); os.close(r); os.waitpid(pid, 0)
json.dump(res, open(out, 'w'))
"""
run_isolated(code, sys.argv[1:])
