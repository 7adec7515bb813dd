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
    inputs, a, valid = update_inputs(decisions(), policy, decider, adv, 2, lambda d: d.agent, minibatch_size=2)
    assert valid.tolist() == [[True, True, True, False], [True, False, False, False]]
    assert a.tolist() == [[0.5, -0.5, -0.5, 0.0], [0.5, 0.0, 0.0, 0.0]]
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
    shared, a1, v1 = update_inputs(decisions(), policy, decider, adv, 1, lambda d: 0, minibatch_size=2)
    assert v1.sum() == 4 and shared["tokens"].shape[:2] == (1, 4)


def test_batch_counts_and_call_ratio():
    batch = RolloutBatch(decisions=decisions(), returns=np.array([1.0, 0.0]), n_agents=2, steps=4)
    assert batch.decision_counts().tolist() == [3, 1]
    assert batch.parse_failures().tolist() == [1, 0]
    assert batch.call_ratio() == 4 / (2 * 4 * 2)


def test_episode_seeds_differ_per_round_and_rollout_and_repeat():
    seeds = {episode_seed(0, r, k) for r in range(5) for k in range(6)}
    assert len(seeds) == 30 and episode_seed(3, 1, 2) == episode_seed(3, 1, 2)
