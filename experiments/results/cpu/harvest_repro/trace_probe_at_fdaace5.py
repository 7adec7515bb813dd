"""Diagnostic: per-(episode, step) state hashes of a Harvest burn-in run in the isolated child."""
import sys, json
from omjax.envs.meltingpot.isolated import run_isolated
code = r"""
import hashlib, json, sys
import numpy as np
from omjax.envs.meltingpot import adapter
import omjax.options.harvest as h
variant, so, te, el, out = sys.argv[1:]
trace = []
orig_reset, orig_step = adapter.MeltingPotEnv.reset, adapter.MeltingPotEnv.step
def digest(s):
    m = hashlib.sha1()
    for a in (s.pos, s.ori, s.alive, s.apples, s.reward):
        m.update(np.ascontiguousarray(a).tobytes())
    return m.hexdigest()[:12]
def reset(self, seed):
    s = orig_reset(self, seed); trace.append([digest(s)]); return s
def step(self, actions):
    s = orig_step(self, actions); trace[-1].append(digest(s)); return s
adapter.MeltingPotEnv.reset, adapter.MeltingPotEnv.step = reset, step
t = h.LIBRARY.burnin(variant, int(so), int(te), 0, False, None if el == '-' else int(el))
json.dump({"records": len(t), "trace": trace}, open(out, "w"))
"""
variant, so, te, el, out = sys.argv[1:]
run_isolated(code, [variant, so, te, el, out])
