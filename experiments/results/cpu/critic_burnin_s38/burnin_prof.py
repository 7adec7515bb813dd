"""Time the twenty-third setting's critic burn-in: total, and inside UniformQ.estimate."""
import sys, time, pickle
sys.path.insert(0, "experiments")
import numpy as np
import learning, common
from omjax.config import load_config
from omjax.options.libraries import resolve_library
from omjax.games import make_game
from omjax.train import continuation
from omjax.train.continuation import UniformQ
from omjax.train.rollout import burnin_seed

n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
s = learning.SETTINGS["overcooked_q_last_burn_realign3_12"]
cfg = resolve_library(load_config(common.CONFIGS / s.config, list(s.overrides)))
game = make_game(cfg.env, cfg.policy.action_interface)
q = UniformQ(game, cfg.train.q_horizon, cfg.train.q_rollouts)
spent = [0.0, 0]
orig = q.estimate
def timed(*a, **k):
    t0 = time.perf_counter(); out = orig(*a, **k); spent[0] += time.perf_counter() - t0; spent[1] += 1; return out
q.estimate = timed
t0 = time.perf_counter()
menus = continuation.uniform_menus(game, q, [burnin_seed(cfg.seed, j) for j in range(n)], cfg.train.critic_keys)
total = time.perf_counter() - t0
print(f"{n} episodes: {total:.1f} s, estimate {spent[0]:.1f} s in {spent[1]} calls, {len(menus)} labelled decisions")
pickle.dump(menus, open(f"runs/s38/burnin_{n}.pkl", "wb"))
game.close()
