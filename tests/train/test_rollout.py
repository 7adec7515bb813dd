"""Decision records -> padded per-adapter update batches; episode seeds; call ratio."""

import numpy as np

from omjax.config import PolicyConfig
from omjax.options.menu import MenuItem
from omjax.train.policy import Branches, LetterPolicy
from omjax.train.rollout import Decider, Decision, RolloutBatch, episode_seed, update_inputs


def menu(n):
    return [MenuItem(chr(65 + j), j, f"opt{j}", None, f"opt{j}") for j in range(n)]


# Two state labels: "x" (one token, then `choice:` as two) and "y z" (two tokens, then two).
BRANCHES = Branches(("x", "y z"), ((11, 12, 13), (14, 15, 12, 13)), (1, 2))


def decisions():
    # Agent 0: 3 decisions (rollouts 0, 1, 1); agent 1: 1 decision (rollout 0).
    return [
        Decision(0, 0, 0, [5, 6, 7], [9], "A", menu(3), 2, -1.0, True, BRANCHES, 1),
        Decision(1, 0, 0, [5, 6], [9], "B", menu(4), 1, -1.2, True, BRANCHES, 0),
        Decision(0, 1, 1, [5], [9], "A", menu(2), 0, -0.5, True, BRANCHES, 1),
        Decision(1, 0, 3, [5, 6, 7, 8], [9], "A", menu(3), 0, -0.7, False, BRANCHES, 0),
    ]


def test_update_inputs_group_by_agent_pad_and_mask(tiny_model):
    policy = LetterPolicy(tiny_model.family, tiny_model.config, 2.0, 1.0)
    decider = Decider(policy, tiny_model.tokenizer, PolicyConfig())
    adv = np.array([0.5, -0.5])
    batch = update_inputs(decisions(), policy, decider, adv, 2, lambda d: d.agent, minibatch_size=2)
    inputs = batch.inputs
    assert batch.valid.tolist() == [[True, True, True, False], [True, False, False, False]]
    assert batch.advantage.tolist() == [[0.5, -0.5, -0.5, 0.0], [0.5, 0.0, 0.0, 0.0]]
    # The old log-probs are the rollout's; no decision kept a trunk, so the update computes it.
    assert np.allclose(batch.old_logp, [[-1.0, -1.2, -0.7, 0.0], [-0.5, 0.0, 0.0, 0.0]])
    assert "trunk" not in inputs
    assert inputs["action"][0, :3].tolist() == [2, 1, 0] and inputs["state"][0, :3].tolist() == [1, 0, 0]
    assert inputs["menu_mask"][0, 1].sum() == 4 and inputs["menu_mask"][1, 0].sum() == 2
    # Left padding: each prompt ends where the branch block (2 branches x 4 tokens) starts.
    block = 2 * 4
    assert inputs["tokens"][0, 0, -block - 3:-block].tolist() == [5, 6, 7]
    assert (inputs["mask"][0, 0, :-block] > 0).sum() == 3
    assert inputs["tokens"][0, 0, -block:].tolist() == [11, 12, 13, 0, 14, 15, 12, 13]
    assert inputs["mask"][0, 0, -block:].tolist() == [2, 2, 2, 0, 3, 3, 3, 3]
    assert inputs["label_mask"][0, 0].tolist() == [[True, False, False, False], [True, True, False, False]]
    assert inputs["end"][0, 0].tolist() == [2, 7]
    shared = update_inputs(decisions(), policy, decider, adv, 1, lambda d: 0, minibatch_size=2)
    assert shared.valid.sum() == 4 and shared.inputs["tokens"].shape[:2] == (1, 4)


def test_own_advantages_and_every_entrys_ride_with_each_decision(tiny_model):
    """A credit that gives each decision its own advantage and every menu entry's
    (`train.credit: {kind: continuation}`): `advantages=None` reads them from the decisions, the
    entries' padded to the menu width; a per-step array is refused."""
    policy = LetterPolicy(tiny_model.family, tiny_model.config, 2.0, 1.0)
    decider = Decider(policy, tiny_model.tokenizer, PolicyConfig())
    ds = decisions()
    for j, d in enumerate(ds):
        d.advantage = 0.1 * (j + 1)
        d.option_advantages = np.arange(len(d.menu), dtype=np.float32) - j
    batch = update_inputs(ds, policy, decider, None, 2, lambda d: d.agent, minibatch_size=2)
    np.testing.assert_allclose(batch.advantage, [[0.1, 0.2, 0.4, 0.0], [0.3, 0.0, 0.0, 0.0]], rtol=1e-6)
    np.testing.assert_allclose(batch.option_advantage[0, 1, :4], [-1, 0, 1, 2])
    np.testing.assert_allclose(batch.option_advantage[1, 0, :2], [-2, -1])
    assert (batch.option_advantage[0, 3] == 0).all()  # padding row
    try:
        update_inputs(decisions(), policy, decider, np.zeros((2, 4)), 2, lambda d: d.agent, minibatch_size=2)
    except ValueError as err:
        assert "[rollouts]" in str(err)
    else:
        raise AssertionError("a per-step advantage array was accepted")


def test_kept_trunks_are_laid_out_as_their_tokens(tiny_model):
    """Each decision's kept trunk rows land where `letter_inputs` puts its tokens: the prompt's
    rows right-aligned before the branch block, each branch's rows at the start of its slot."""
    policy = LetterPolicy(tiny_model.family, tiny_model.config, 2.0, 1.0, frozen_layers=1)
    decider = Decider(policy, tiny_model.tokenizer, PolicyConfig())
    rows = []
    for j, d in enumerate(decisions()):
        n = len(d.prompt_ids) + sum(len(t) for t in d.branches.tokens)
        d.trunk = (100 * j + np.arange(n, dtype=np.float32))[:, None] * np.ones((1, 3), np.float32)  # [n, D=3]
        rows.append(d)
    batch = update_inputs(rows, policy, decider, np.array([0.5, -0.5]), 2, lambda d: d.agent, minibatch_size=2)
    trunk = batch.inputs["trunk"]
    assert trunk.n_layers == 1 and trunk.hidden.shape == batch.inputs["tokens"].shape + (3,)
    h = trunk.hidden[..., 0]  # [G, B, T + 2*4]
    block = 2 * 4
    # Agent 0's first decision (decision 0): prompt [5, 6, 7] -> 0, 1, 2; branch "x" -> 3, 4, 5, "y z" -> 6..9.
    assert h[0, 0, -block - 3:-block].tolist() == [0, 1, 2]
    assert h[0, 0, -block:].tolist() == [3, 4, 5, 0, 6, 7, 8, 9]
    assert (h[0, 0, :-block - 3] == 0).all() and (h[0, 3] == 0).all()  # left padding, padding row
    assert h[1, 0, -block - 1:].tolist() == [200, 201, 202, 203, 0, 204, 205, 206, 207]  # agent 1: decision 2


def test_batch_counts_and_call_ratio():
    batch = RolloutBatch(decisions=decisions(), rewards=np.array([[0.0, 1.0, 0.0, 0.0], [0.0] * 4]), n_agents=2,
                         steps=4)
    assert batch.returns.tolist() == [1.0, 0.0]
    assert batch.decision_counts().tolist() == [3, 1]
    assert batch.parse_failures().tolist() == [1, 0]
    assert batch.call_ratio() == 4 / (2 * 4 * 2)


def test_episode_seeds_differ_per_round_and_rollout_and_repeat():
    seeds = {episode_seed(0, r, k) for r in range(5) for k in range(6)}
    assert len(seeds) == 30 and episode_seed(3, 1, 2) == episode_seed(3, 1, 2)
