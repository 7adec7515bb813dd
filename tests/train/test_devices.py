"""Sharding over devices: a group of seeds trained on 4 (forced host) CPU devices, the adapter
bank and decision rows split over them, equals the same group on one device."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r'''
import json, sys
import jax
import numpy as np
from omjax.config import load_config
from omjax.models import load
from omjax.train.trainer import Trainer
from bandit import MenuBandit

model_dir, out = sys.argv[1], sys.argv[2]
assert jax.device_count() == 4, jax.devices()
model = load(model_dir)
cfg = load_config(None, ["env.n_agents=2", "env.horizon=2", "lora.rank=4", "lora.alpha=8", "lora.targets=q,v",
                         "train.rollouts=4", "train.lr=0.03", "train.minibatch_size=4", "train.kl_coef=0.01",
                         "train.rounds=2", "policy.temperature=1.0", "run.progress=false", "run.plot_every=100"])
runs = {}
for name, devices in (("one", jax.devices()[:1]), ("four", jax.devices())):
    trainer = Trainer(cfg, model=model, run_dir=f"{out}/{name}", game=MenuBandit(2, 2), seeds=[0, 1],
                      devices=devices)
    runs[name] = [[{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]
                  for rows in trainer.run_group()]
    if name == "four":
        states = trainer.init_states()
        bank = trainer.placement.split(jax.tree.map(lambda *x: jax.numpy.concatenate(x), *[s.bank for s in states]))
        runs["bank_devices"] = len(jax.tree.leaves(bank)[0].sharding.device_set)
json.dump(runs, open(f"{out}/runs.json", "w"))
'''


def test_four_devices_equal_one(tiny_model, tmp_path):
    from test_seeds import assert_close

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parent)])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, tiny_model.source, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert runs["bank_devices"] == 4
    assert any(r["updated"] for rows in runs["one"] for r in rows)
    assert_close(runs["one"], runs["four"])
    for s in (0, 1):
        for r in range(2):
            one = (tmp_path / "one" / f"seed_{s}" / "decisions" / f"round_{r:04d}.jsonl").read_text().splitlines()
            four = (tmp_path / "four" / f"seed_{s}" / "decisions" / f"round_{r:04d}.jsonl").read_text().splitlines()
            assert [json.loads(x)["letter"] for x in one] == [json.loads(x)["letter"] for x in four]
