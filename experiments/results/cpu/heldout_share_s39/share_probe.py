"""Frozen then trained held-out batches (12 episodes, short horizon) as learning.py plays them now
(A: a plain trainer for the frozen base, a realigned one for the trained team) and with one
realigned trainer for both (B). Wall and XLA compile seconds per phase; B's episodes must equal A's."""
import json, sys, time
sys.path.insert(0, "experiments")
import jax
import learning, common
from omjax.config import load_config
from omjax.train.trainer import Trainer
from omjax.train.checkpoint import Checkpointer

H = int(sys.argv[1]) if len(sys.argv) > 1 else 30
compile_s = [0.0]
jax.monitoring.register_event_duration_secs_listener(
    lambda ev, d, **_: compile_s.__setitem__(0, compile_s[0] + d) if ev == "/jax/core/compile/backend_compile_duration" else None)
setting = learning.SETTINGS["overcooked_q_last_burn_realign3_12"]
base = [*setting.overrides, f"env.horizon={H}", "run.out_dir=runs/s39/probe"]
plain = load_config(common.CONFIGS / setting.config, [*base, *learning.held_out_overrides(setting, "frozen")])
real = load_config(common.CONFIGS / setting.config, [*base, *setting.eval_overrides])
seeds = list(range(5000, 5012))
run_dir = "runs/learning_s38/overcooked_q_last_burn_realign3_12/per_agent"
out = {}

def phase(name, trainer, bank):
    c0, t0 = compile_s[0], time.time()
    eps = learning.evaluate(trainer, bank, seeds, 12)
    out[name] = {"wall_s": round(time.time() - t0, 1), "compile_s": round(compile_s[0] - c0, 1)}
    print(name, out[name], flush=True)
    return eps

tf = Trainer(plain)
model = tf.model
a1 = phase("A frozen (plain trainer)", tf, tf.init_state().bank)
tt = Trainer(real, model=model)
ck = Checkpointer(run_dir, 2)
trained = ck.restore(tt.init_state()).state.bank
ck.close()
a2 = phase("A trained (realigned trainer)", tt, trained)
ts = Trainer(real, model=model)
b1 = phase("B frozen (shared realigned trainer)", ts, ts.init_state().bank)
b2 = phase("B trained (same trainer)", ts, trained)
out["frozen_same"] = a1 == b1
out["trained_same"] = a2 == b2
out["trained_units"] = [e["units"] for e in a2]
print(json.dumps(out))
