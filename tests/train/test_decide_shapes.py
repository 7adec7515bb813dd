"""`policy.decide_shapes=fixed`: letter-mode decisions at a run's few high-water shapes (one call
per env step, rows padded to every decision the step could hold), on the real Overcooked game
(a tiny random Llama decides): a run compiles decide a few times at most, and decides exactly
as the adaptive shapes do under the same keys."""

import numpy as np
import pytest

from omjax.config import ConfigError, load_config
from omjax.train.trainer import Trainer
from tests.eval.tiny_model import write_tiny_llama

CFG = ["env.game=overcooked", "env.layout=asymmetric_advantages", "env.n_agents=2", "env.horizon=24",
       "env.reward_shaping=1.0", "train.rollouts=2", "train.minibatch_size=8", "train.update_rows=32",
       "train.update_tokens=512", "lora.rank=2", "lora.alpha=4", "lora.targets=q,v", "train.lr=0.03",
       "run.progress=false", "run.plot_every=100"]


@pytest.fixture(scope="module")
def overcooked_model(tmp_path_factory):
    from omjax.models import load

    return load(write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_shapes")))


def play(model, tmp_path, mode, rounds):
    trainer = Trainer(load_config(None, [*CFG, f"policy.decide_shapes={mode}", f"run.out_dir={tmp_path / mode}"]),
                      model=model)
    state, out = trainer.init_state(), []
    for _ in range(rounds):
        state, row, batch = trainer.round(state)
        out.append(batch)
    return trainer, out


def test_fixed_shapes_compile_decide_at_most_four_times_and_decide_the_same(overcooked_model, tmp_path):
    fixed, batches = play(overcooked_model, tmp_path, "fixed", 3)
    assert fixed.decider.fixed_shapes and fixed.decider.high_water[0] == 4  # 1 seed x K=2 x 2 agents
    programs = fixed.policy._decide._cache_size()
    assert 1 <= programs <= 4, programs
    assert fixed.round_compilations[2] == 0, fixed.round_compilations  # the last round compiles nothing
    adaptive, ref = play(overcooked_model, tmp_path, "adaptive", 3)
    assert not adaptive.decider.fixed_shapes
    print(f"decide programs over 3 rounds: fixed {programs}, adaptive {adaptive.policy._decide._cache_size()}")
    for b, r in zip(batches, ref):  # the same decisions (so the same episodes), the same log-probs
        assert [(d.rollout, d.agent, d.step, d.state, d.action) for d in b.decisions] == \
            [(d.rollout, d.agent, d.step, d.state, d.action) for d in r.decisions]
        np.testing.assert_allclose([d.logp for d in b.decisions], [d.logp for d in r.decisions], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(b.rewards, r.rewards)


def test_auto_is_adaptive_on_the_cpu_and_bad_modes_name_the_key():
    assert load_config(None).policy.decide_shapes == "auto"
    with pytest.raises(ConfigError, match="policy.decide_shapes"):
        load_config(None, ["policy.decide_shapes=static"])
