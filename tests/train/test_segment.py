"""`train.segment`: cohorts of K rollouts that play S steps from a shared root state reached by
uniform menu picks, on the real Overcooked game (a tiny random Llama decides)."""

import jax
import numpy as np
import pytest

from omjax.config import load_config
from omjax.train.rollout import collect_group, segment_start
from omjax.train.trainer import Trainer
from tests.eval.tiny_model import write_tiny_llama

HORIZON, SEGMENT, K = 24, 6, 4
CFG = ["env.game=overcooked", "env.layout=asymmetric_advantages", "env.n_agents=2", f"env.horizon={HORIZON}",
       "env.reward_shaping=1.0", "train.rollouts=4", "train.minibatch_size=4", "lora.rank=2", "lora.alpha=4",
       "lora.targets=q,v", "train.lr=0.03", "run.progress=false", "run.plot_every=100"]


@pytest.fixture(scope="module")
def overcooked_model(tmp_path_factory):
    from omjax.models import load

    return load(write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_segment")))


def host(game):
    return jax.tree.map(np.array, game.states)


def test_segment_start_is_uniform_over_the_roots_that_fit():
    starts = [segment_start(0, r, HORIZON, SEGMENT) for r in range(400)]
    assert starts == [segment_start(0, r, HORIZON, SEGMENT) for r in range(400)]
    assert min(starts) == 0 and max(starts) == HORIZON - SEGMENT
    assert segment_start(1, 0, HORIZON, SEGMENT) != segment_start(0, 0, HORIZON, SEGMENT) or \
        segment_start(1, 1, HORIZON, SEGMENT) != segment_start(0, 1, HORIZON, SEGMENT)
    assert segment_start(0, 0, HORIZON, HORIZON) == 0
    with pytest.raises(ValueError, match="a segment must have 1 .. 24"):
        segment_start(0, 0, HORIZON, HORIZON + 1)


def test_a_cohort_walks_to_one_root_together_then_plays_its_segment(overcooked_model, tmp_path):
    trainer = Trainer(load_config(None, [*CFG, f"run.out_dir={tmp_path}"]), model=overcooked_model)
    game, bank = trainer.game, trainer.init_state().bank  # [A, ...]
    keys = jax.random.PRNGKey(0)[None]
    start = 9
    seen = []  # after each env step: the K states and each episode's deliveries so far

    def record(g):
        seen.append((host(g), g.agent_returns().sum(axis=-1)))

    batch, = collect_group(game, trainer.decider, trainer.model.params, bank, K, keys, [0], 0, 2,
                           on_step=record, starts=[start], steps=SEGMENT)
    assert len(seen) == start + SEGMENT
    root = seen[start - 1][0]
    # Up to the root the K episodes are one episode (shared uniform menu picks)...
    for states, _ in seen[:start]:
        for leaf in jax.tree.leaves(states):
            assert (leaf == leaf[:1]).all()
    assert (root.time == start).all()
    # ...and they moved between the first step and the root, then the policy's continuations parted.
    first = seen[0][0]
    assert any((a != b).any() for a, b in zip(jax.tree.leaves(root.pos), jax.tree.leaves(first.pos)))
    end = seen[-1][0]
    assert any(not (leaf == leaf[:1]).all() for leaf in jax.tree.leaves(end.pos))
    # The rollouts' record is the segment's: steps 0 .. S-1 from the root, its rewards, its units.
    assert batch.start == start and batch.steps == SEGMENT and batch.rewards.shape == (K, SEGMENT)
    assert batch.decisions and {d.step for d in batch.decisions} <= set(range(SEGMENT))
    assert min(d.step for d in batch.decisions) == 0  # some agent decides at the root itself
    np.testing.assert_array_equal(batch.units, seen[-1][1] - seen[start - 1][1])
    # The walking picks are the round's, not the policy's: an untrained and a moved bank walk
    # to the same root.
    moved = jax.tree.map(lambda x: x + 0.5, bank)
    again = []
    collect_group(game, trainer.decider, trainer.model.params, moved, K, keys, [0], 0, 2,
                  on_step=lambda g: again.append(host(g)), starts=[start], steps=1)
    for a, b in zip(jax.tree.leaves(again[start - 1]), jax.tree.leaves(root)):
        np.testing.assert_array_equal(a, b)


def test_whole_episode_segments_are_the_default_rollouts(overcooked_model, tmp_path):
    trainer = Trainer(load_config(None, [*CFG, "env.horizon=8", f"run.out_dir={tmp_path}"]), model=overcooked_model)
    bank = trainer.init_state().bank  # [A, ...]
    args = (trainer.game, trainer.decider, trainer.model.params, bank, K, jax.random.PRNGKey(3)[None], [0], 0, 2)
    plain, = collect_group(*args)
    whole, = collect_group(*args, starts=[0], steps=8)
    assert [(d.rollout, d.agent, d.step, d.action, d.logp) for d in plain.decisions] == \
        [(d.rollout, d.agent, d.step, d.action, d.logp) for d in whole.decisions]
    np.testing.assert_array_equal(plain.rewards, whole.rewards)
    with pytest.raises(ValueError, match="do not fit"):
        collect_group(*args, starts=[4], steps=5)


def test_trainer_rounds_play_the_configured_segment(overcooked_model, tmp_path):
    trainer = Trainer(load_config(None, [*CFG, f"train.segment={SEGMENT}",
                                         "train.rounds=2", f"run.out_dir={tmp_path}"]), model=overcooked_model)
    state = trainer.init_state()
    for r in range(2):
        state, row, batch = trainer.round(state)
        assert row["start"] == batch.start == segment_start(0, r, HORIZON, SEGMENT)
        assert batch.rewards.shape == (K, SEGMENT) and len(row["deliveries"]) == K
        assert row["updated"] == (batch.returns.std() > 0)
