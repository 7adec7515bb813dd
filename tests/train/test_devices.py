"""Sharding over devices (4 forced host CPU devices, in a subprocess): a group of seeds trained
with the adapter bank and decision rows split over the devices, or with the base sharded over a
2 x 2 mesh's model axis, equals the same group on one device; the bench's decide call, logits and
update with the base sharded over 2 x 2 and 1 x 4 meshes equal one device's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from jax.sharding import PartitionSpec

from omjax.config import ConfigError, load_config
from omjax.models import configs
from omjax.train.sharding import base_spec, model_axis

SETTINGS = ["env.n_agents=2", "env.horizon=2", "lora.rank=4", "lora.alpha=8", "lora.targets=q,v",
            "train.rollouts=4", "train.lr=0.03", "train.minibatch_size=4", "train.kl_coef=0.01",
            "train.rounds=2", "policy.temperature=1.0", "run.progress=false", "run.plot_every=100"]

TRAIN = r'''
import json, sys
import jax
from omjax.config import load_config
from omjax.models import load
from omjax.train.trainer import Trainer
from bandit import MenuBandit

model_dir, out, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
assert jax.device_count() == 4, jax.devices()
model = load(model_dir)
cfg = load_config(None, settings)
sharded = load_config(None, settings + ["run.base_sharding=shard", "run.model_devices=2"])
runs = {}
for name, devices, c in (("one", jax.devices()[:1], cfg), ("four", jax.devices(), cfg),
                         ("sharded", jax.devices(), sharded)):
    trainer = Trainer(c, model=model, run_dir=f"{out}/{name}", game=MenuBandit(2, 2), seeds=[0, 1],
                      devices=devices)
    runs[name] = [[{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]
                  for rows in trainer.run_group()]
    if name == "one":
        continue
    states = trainer.init_states()
    bank = trainer.placement.bank(jax.tree.map(lambda *x: jax.numpy.concatenate(x), *[s.bank for s in states]))
    runs[name + "_layout"] = {"mesh": [trainer.placement.data_devices, trainer.placement.model_devices],
                              "bank_devices": len(jax.tree.leaves(bank)[0].sharding.device_set),
                              "q": str(trainer.params["layers"]["q"].sharding.spec),
                              "o": str(trainer.params["layers"]["o"].sharding.spec),
                              "q_b": str(next(iter(bank["layers"].values()))["q"]["b"].sharding.spec)}
json.dump(runs, open(f"{out}/runs.json", "w"))
'''

CALLS = r'''
import json, sys
import jax
import jax.numpy as jnp
import numpy as np
from omjax.bench import gpu
from omjax.models import configs, load
from omjax.models import lora as lora_lib
from omjax.train.sharding import Placement

source, out, with_update = sys.argv[1], sys.argv[2], sys.argv[3] == "update"
# A checkpoint directory, or random:<backbone> (its tiny published shapes, f32, weights large
# enough that the letters follow the logits rather than the Gumbel noise alone).
model = (configs.random_model(source[7:], jnp.float32, tiny=True, scale=0.1) if source.startswith("random:")
         else load(source))
forward = jax.jit(lambda p, a, t: model.family.forward(p, model.config, t, lora=a, lora_scale=2.0)[0])
tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, (4, 16))
results = {}
for name, devices, m in (("one", jax.devices()[:1], 1), ("2x2", jax.devices(), 2), ("1x4", jax.devices(), 4)):
    placement = Placement(devices, model_devices=m)
    params = placement.base(model.params)
    policy, bank, rows, inputs, keys, n = gpu.decide_case(model, 2, 2, 16)
    bank = placement.bank(bank)
    state, action, logp, _ = policy.decide(params, bank, *placement.split((rows, inputs, keys)))
    logits = forward(params, lora_lib.agent(bank, 1), tokens)
    results[name] = {"state": state[:n].tolist(), "action": action[:n].tolist(), "logp": logp[:n].tolist(),
                     "logits": np.asarray(logits).tolist(),
                     "embed_devices": len(params["embed"].sharding.device_set),
                     "embed_shard_rows": params["embed"].addressable_shards[0].data.shape[0]}
    if with_update and name != "1x4":  # the update compiles for tens of seconds; 2 x 2 shards both axes
        update, ubank, opt, batch, ukeys, active, _ = gpu.update_case(model, 2, 8, 16)
        new = update(params, placement.bank(ubank), placement.bank(opt), *placement.split((batch, ukeys)), active)[0]
        results[name]["new_bank"] = [np.asarray(x).ravel().tolist() for x in jax.tree.leaves(new)]
        results[name]["moved"] = float(sum(np.abs(np.asarray(a) - np.asarray(b)).sum()
                                           for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(ubank))))
json.dump(results, open(f"{out}/calls.json", "w"))
'''


def _cpu_devices_env(n: int) -> dict:
    """The environment of a process with n forced host CPU devices. XLA's CPU client runs every
    device's program on one pool of PJRT_NPROC threads (default: the cores) and a collective
    holds its thread until all n devices reach it, so with fewer threads than devices a program
    with many collectives can deadlock: on this 2-core machine the Qwen3.5 decide on a 1 x 4
    mesh (443 collectives) waited 13 min at PJRT_NPROC=1, mostly hung at the default 2, and ran
    at 8. Two threads per device leave room for the work the waiting devices still queue."""
    root = Path(__file__).resolve().parents[2]
    return {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}", "JAX_PLATFORMS": "cpu",
            "PJRT_NPROC": str(max(2 * n, os.cpu_count() or 1)),
            "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parent)])}


def _run(script, tmp_path, *args):
    env = _cpu_devices_env(4)
    done = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]


def test_four_devices_equal_one(tiny_model, tmp_path):
    from test_seeds import assert_close

    _run(TRAIN, tmp_path, tiny_model.source, tmp_path, json.dumps(SETTINGS))
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert runs["four_layout"]["mesh"] == [4, 1] and runs["four_layout"]["bank_devices"] == 4
    assert runs["four_layout"]["q"] == "P()"
    # Base split over "model" (column-parallel q, row-parallel o; the layer axis whole), q's B factor with it,
    # adapters over "data".
    assert runs["sharded_layout"] == {"mesh": [2, 2], "bank_devices": 4, "q": "P(None, None, 'model')",
                                      "o": "P(None, 'model', None)", "q_b": "P('data', None, None, 'model')"}
    assert any(r["updated"] for rows in runs["one"] for r in rows)
    for name in ("four", "sharded"):
        assert_close(runs["one"], runs[name])
        for s in (0, 1):
            for r in range(2):
                letters = [[json.loads(x)["letter"] for x in (tmp_path / n / f"seed_{s}" / "decisions" /
                                                              f"round_{r:04d}.jsonl").read_text().splitlines()]
                           for n in ("one", name)]
                assert letters[0] == letters[1], (name, s, r)


def _assert_calls_equal_one_device(calls):
    one = calls["one"]
    for name, devices in (("2x2", 2), ("1x4", 4)):
        got = calls[name]
        vocab = len(one["logits"][0][0])  # the table splits on the vocabulary where the axis divides it
        assert got["embed_devices"] == 4
        assert got["embed_shard_rows"] == (vocab // devices if vocab % devices == 0 else vocab)
        assert (got["state"], got["action"]) == (one["state"], one["action"]), name
        np.testing.assert_allclose(got["logp"], one["logp"], rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(got["logits"], one["logits"], rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.slow  # 44 s; test_four_devices_equal_one trains on a sharded 2 x 2 base in the default suite
def test_sharded_base_calls_equal_one_device(tiny_model, tmp_path):
    _run(CALLS, tmp_path, tiny_model.source, tmp_path, "update")
    calls = json.loads((tmp_path / "calls.json").read_text())
    _assert_calls_equal_one_device(calls)
    assert calls["one"]["moved"] > 0
    for a, b in zip(calls["2x2"]["new_bank"], calls["one"]["new_bank"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # at nice 19 on 2 cores under a load of ~11: Qwen3.5 890 s, both 1880 s (6 compiles each)
@pytest.mark.parametrize("backbone", ["qwen3.5-2b", "gemma-4-e2b-it"])
def test_sharded_recurrent_and_gemma4_bases_decide_as_one_device(backbone, tmp_path):
    """The Qwen3.5 (Gated DeltaNet) and gemma-4 (KV sharing, per-layer inputs) families at their
    tiny published shapes: decide and forward on 2 x 2 and 1 x 4 meshes equal one device."""
    _run(CALLS, tmp_path, f"random:{backbone}", tmp_path, "decide")
    _assert_calls_equal_one_device(json.loads((tmp_path / "calls.json").read_text()))


HOST = r'''
import json, sys
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
model_dir, out, settings, port, pid = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5])
jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=pid)
from omjax.config import load_config
from omjax.models import load
from omjax.train.trainer import Trainer
from bandit import MenuBandit
assert (jax.device_count(), jax.local_device_count()) == (4, 2)
cfg = load_config(None, settings + ["run.base_sharding=shard", "run.model_devices=2"])
trainer = Trainer(cfg, model=load(model_dir), run_dir=out, game=MenuBandit(2, 2), seeds=[0, 1])
trainer.run_group()
jax.distributed.shutdown()
'''


@pytest.mark.slow
def test_two_hosts_equal_one_device(tiny_model, tmp_path):
    """Two processes of 2 CPU devices each join one 2 x 2 mesh (`jax.distributed`, gloo): the
    base sharded across them, one shared run directory written by the first; equal to one device."""
    import socket

    from omjax.train.trainer import Trainer
    from test_seeds import assert_close, strip
    from bandit import MenuBandit

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = _cpu_devices_env(2)
    hosts = [subprocess.Popen([sys.executable, "-c", HOST, tiny_model.source, str(tmp_path / "hosts"),
                               json.dumps(SETTINGS), str(port), str(i)], env=env, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    errors = [h.communicate(timeout=900)[1] for h in hosts]
    for h, err in zip(hosts, errors):
        assert h.returncode == 0, err[-3000:]
    one = Trainer(load_config(None, SETTINGS), model=tiny_model, run_dir=tmp_path / "one", game=MenuBandit(2, 2),
                  seeds=[0, 1], devices=jax.devices()[:1]).run_group()
    for s, rows in enumerate(one):
        two = [json.loads(x) for x in (tmp_path / "hosts" / f"seed_{s}" / "metrics.jsonl").read_text().splitlines()]
        assert_close(strip(rows), strip(two))
        assert (tmp_path / "hosts" / f"seed_{s}" / "checkpoints" / "2").is_dir()


@pytest.mark.parametrize("name", sorted(configs.PUBLISHED))
def test_every_published_base_weight_has_a_layout(name):
    """At the real shapes, 8 model devices (a host of 8 GPUs) split all but the norms and scalars."""
    _, tree = configs.abstract_params(name)
    specs = jax.tree_util.tree_map_with_path(lambda p, x: base_spec(p, x, 8), tree)
    pairs = list(zip(jax.tree.leaves(tree), jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))))
    split = sum(x.size for x, spec in pairs if "model" in spec)
    assert split / sum(x.size for x, _ in pairs) > 0.999


def test_model_axis_choice():
    need = lambda m: 10 + 90 / m  # 90 bytes of base, 10 of everything else
    assert model_axis("auto", 8, 0, need, None) == 1          # CPU: no limit reported
    assert model_axis("auto", 8, 0, need, 100) == 1           # fits whole
    assert model_axis("auto", 8, 0, need, 60) == 2            # 10 + 45
    assert model_axis("auto", 8, 0, need, 35) == 4            # 10 + 22.5
    assert model_axis("auto", 8, 0, need, 5) == 8             # nothing fits: every device
    assert model_axis("shard", 8, 0, need, 100) == 2
    assert model_axis("shard", 8, 0, need, None) == 8
    assert model_axis("replicate", 8, 0, need, 5) == 1
    assert model_axis("auto", 6, 0, need, 45) == 3            # divisors of the device count only
    assert model_axis("shard", 8, 4, need, None) == 4
    assert model_axis("shard", 1, 0, need, 5) == 1
    with pytest.raises(ConfigError, match="run.model_devices: 3 does not divide the 8 devices"):
        model_axis("shard", 8, 3, need, None)


def test_base_sharding_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="run.base_sharding"):
        load_config(None, ["run.base_sharding=split"])
    with pytest.raises(ConfigError, match="run.model_devices: must be >= 0"):
        load_config(None, ["run.model_devices=-1"])
    with pytest.raises(ConfigError, match="run.model_devices: 2 devices shard the base, but run.base_sharding=replicate"):
        load_config(None, ["run.model_devices=2", "run.base_sharding=replicate"])


def test_a_base_weight_without_a_rule_is_named():
    path = (jax.tree_util.DictKey("layers"), jax.tree_util.SequenceKey(0), jax.tree_util.DictKey("w_new"))
    with pytest.raises(ValueError, match=r"no sharding rule for base parameter \['layers'\]\[0\]\['w_new'\] \(4, 6\)"):
        base_spec(path, np.zeros((4, 6)), 2)
