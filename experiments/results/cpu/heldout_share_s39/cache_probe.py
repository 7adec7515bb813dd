import sys, time, functools
sys.path.insert(0, "experiments")
import jax, numpy as np
import learning, common
from omjax.config import load_config
from omjax.train.trainer import Trainer
from omjax.train.checkpoint import Checkpointer
from omjax.train.rollout import Request, Memory

setting = learning.SETTINGS["overcooked_q_last_burn_realign3_12"]
real = load_config(common.CONFIGS / setting.config, [*setting.overrides, *setting.eval_overrides, "run.out_dir=runs/s39/probe"])
ts = Trainer(real)
ck = Checkpointer("runs/learning_s38/overcooked_q_last_burn_realign3_12/per_agent", 2)
trained = ck.restore(ts.init_state()).state.bank
ck.close()
zero = ts.init_state().bank
print(jax.tree.map(lambda a: (a.shape, a.dtype, a.sharding, getattr(a, "weak_type", None)), jax.tree.leaves(zero)[:2]))
print(jax.tree.map(lambda a: (a.shape, a.dtype, a.sharding, getattr(a, "weak_type", None)), jax.tree.leaves(trained)[:2]))
print(jax.tree.structure(zero) == jax.tree.structure(trained))
g, d = ts.game, ts.decider
g.reset([5000])
system = g.system_message()
reqs = []
for i in range(2):
    menu = d.labelled(g.menu(0, i, np.random.default_rng([5000, i])))
    mem = Memory(d.cfg.memory_macros, d.cfg.reward_window)
    prompt = d.prompt(system, g.user_message(0, i, menu, mem))
    reqs.append(Request(0, i, menu, prompt, 0, None, adapter=i, rng=np.random.default_rng(0),
                        branches=d.state_branches(g, 0, i), variants=[]))
keys = jax.random.split(jax.random.PRNGKey(0), 2)
pol = d.policy
for name, bank in (("zero", zero), ("trained", trained), ("zero again", zero)):
    prefix = d.prefill(ts.model.params, bank, system, False)
    t0 = time.time()
    d.decide(ts.model.params, bank, reqs, keys, prefix, False)
    print(name, round(time.time() - t0, 1), "s; decide cache", pol._decide._cache_size(), flush=True)
za, ta = jax.tree.leaves(zero), jax.tree.leaves(trained)
print("committed zero", {a._committed for a in za}, "trained", {a._committed for a in ta})
print("diff meta", [(i, a.shape, b.shape, a.dtype, b.dtype) for i, (a, b) in enumerate(zip(za, ta)) if a.shape != b.shape or a.dtype != b.dtype or a.sharding != b.sharding])
t2 = jax.tree.map(lambda a: jax.device_put(np.asarray(a)), trained)
print("host round trip committed", {a._committed for a in jax.tree.leaves(t2)})
prefix = d.prefill(ts.model.params, t2, system, False)
d.decide(ts.model.params, t2, reqs, keys, prefix, False)
print("after host round trip: decide cache", pol._decide._cache_size())
