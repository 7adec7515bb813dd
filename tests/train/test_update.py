"""The jitted, vmapped PA-MAGRPO update on a small linear-softmax menu policy.

The policy is a fixture standing in for the LLM only; the update under test is the shipped one.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.config import LoRAConfig
from omjax.train import update as upd

F, M = 5, 4
W0 = jnp.linspace(-0.5, 0.5, F)


def menu_policy(base, lora, inputs):
    w = base if lora is None else base + lora["w"]
    logits = jnp.einsum("bmf,f->bm", inputs["features"], w)
    logits = jnp.where(inputs["menu_mask"], logits, -1e9)
    logp = jax.nn.log_softmax(logits, axis=-1)
    chosen = jnp.take_along_axis(logp, inputs["action"][:, None], axis=-1)[:, 0]
    return upd.PolicyOut(logp=chosen, dist=logp, dist_mask=inputs["menu_mask"])


def make_batches(key, n_agents, b, n_valid):
    k1, k2, k3 = jax.random.split(key, 3)
    inputs = {
        "features": jax.random.normal(k1, (n_agents, b, M, F)),
        "menu_mask": jnp.ones((n_agents, b, M), bool).at[:, :, -1].set(jax.random.bernoulli(k2, 0.5, (n_agents, b))),
        "action": jax.random.randint(k3, (n_agents, b), 0, M - 1),
    }
    valid = jnp.arange(b)[None, :] < jnp.asarray(n_valid)[:, None]  # [A, B]
    adv = jnp.where(valid, jax.random.normal(jax.random.fold_in(key, 7), (n_agents, b)), 0.0)
    return upd.DecisionBatch(inputs=inputs, advantage=adv, valid=valid)


SETTINGS = upd.UpdateSettings(clip_eps=0.2, kl_coef=0.05, epochs=2, minibatch_size=4, kl_kind="exact")
# Every test uses these shapes so that the jitted update compiles once per session.
N_AGENTS, B = 3, 12
OPT = upd.make_optimizer(0.1, 1.0)
BANK_UPDATE = upd.make_bank_update(menu_policy, OPT, SETTINGS)


def zero_bank():
    return {"w": jnp.zeros((N_AGENTS, F))}


def test_vmapped_update_equals_python_loop_over_agents():
    bank = {"w": jax.random.normal(jax.random.key(1), (N_AGENTS, F)) * 0.1}
    opt_state = upd.init_opt_state(OPT, bank)
    batch = make_batches(jax.random.key(2), N_AGENTS, B, [12, 7, 3])
    keys = jax.random.split(jax.random.key(3), N_AGENTS)

    new_bank, new_opt, metrics = BANK_UPDATE(W0, bank, opt_state, batch, keys)

    one = jax.jit(upd.make_agent_update(menu_policy, OPT, SETTINGS))
    for i in range(N_AGENTS):
        sl = lambda x: x[i]
        lora_i, opt_i, m_i = one(W0, jax.tree.map(sl, bank), jax.tree.map(sl, opt_state), jax.tree.map(sl, batch), keys[i])
        np.testing.assert_allclose(new_bank["w"][i], lora_i["w"], rtol=1e-5, atol=1e-6)
        for a, b in zip(jax.tree.leaves(jax.tree.map(sl, new_opt)), jax.tree.leaves(opt_i)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(metrics.loss[i], m_i.loss, rtol=1e-5, atol=1e-6)
    # Each agent moved, and padding-only minibatches were skipped: 3 minibatches of 4 per epoch.
    assert np.all(np.abs(np.asarray(new_bank["w"] - bank["w"])).sum(-1) > 0)
    np.testing.assert_array_equal(metrics.stepped[:, 0], [[True, True, True], [True, True, False], [True, False, False]])


def test_ratio_is_one_and_kl_zero_at_first_step_of_fresh_adapter():
    bank = zero_bank()
    batch = make_batches(jax.random.key(4), N_AGENTS, B, [12, 12, 12])
    keys = jax.random.split(jax.random.key(5), N_AGENTS)
    _, _, metrics = BANK_UPDATE(W0, bank, upd.init_opt_state(OPT, bank), batch, keys)
    assert metrics.ratio.shape == (N_AGENTS, SETTINGS.epochs, B // SETTINGS.minibatch_size)
    np.testing.assert_array_equal(metrics.ratio[:, 0, 0], np.ones(N_AGENTS))
    np.testing.assert_array_equal(metrics.kl[:, 0, 0], np.zeros(N_AGENTS))
    np.testing.assert_array_equal(metrics.clip_frac[:, 0, 0], np.zeros(N_AGENTS))
    # After steps the policy has moved away from the reference.
    assert np.all(np.asarray(metrics.kl[:, -1, -1]) > 0)


def test_only_the_agents_own_decisions_move_its_adapter():
    bank = zero_bank()
    batch = make_batches(jax.random.key(6), N_AGENTS, B, [12, 0, 5])  # agent 1 made no decisions
    keys = jax.random.split(jax.random.key(7), N_AGENTS)
    new_bank, _, metrics = BANK_UPDATE(W0, bank, upd.init_opt_state(OPT, bank), batch, keys)
    assert np.abs(np.asarray(new_bank["w"][0])).sum() > 0
    assert np.abs(np.asarray(new_bank["w"][2])).sum() > 0
    np.testing.assert_array_equal(new_bank["w"][1], np.zeros(F))
    assert not np.any(np.asarray(metrics.stepped[1]))


def test_minibatch_order_comes_from_the_key():
    bank = zero_bank()
    batch = make_batches(jax.random.key(8), N_AGENTS, B, [12, 12, 12])
    state = upd.init_opt_state(OPT, bank)
    a, _, _ = BANK_UPDATE(W0, bank, state, batch, jax.random.split(jax.random.key(9), N_AGENTS))
    b, _, _ = BANK_UPDATE(W0, bank, state, batch, jax.random.split(jax.random.key(9), N_AGENTS))
    c, _, _ = BANK_UPDATE(W0, bank, state, batch, jax.random.split(jax.random.key(10), N_AGENTS))
    np.testing.assert_array_equal(a["w"], b["w"])
    assert not np.allclose(a["w"], c["w"])


def test_skipping_padding_minibatches_changes_nothing():
    """`n_active` = the minibatches any agent needs: the rest are skipped, not computed, and the
    result equals the update that walks every minibatch."""
    bank = {"w": jax.random.normal(jax.random.key(6), (N_AGENTS, F)) * 0.1}
    opt_state = upd.init_opt_state(OPT, bank)
    batch = make_batches(jax.random.key(7), N_AGENTS, B, [6, 3, 1])
    keys = jax.random.split(jax.random.key(8), N_AGENTS)
    n_active = upd.active_minibatches(batch.valid, SETTINGS.minibatch_size)
    assert n_active == 2
    full = BANK_UPDATE(W0, bank, opt_state, batch, keys)
    skipped = BANK_UPDATE(W0, bank, opt_state, batch, keys, n_active)
    for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(skipped)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def letter_habit_policy(base, lora, inputs):
    """Logits that ignore the menu: a pure letter habit (base bias plus the adapter's)."""
    logits = base + (0.0 if lora is None else lora["b"])  # [M]
    logits = jnp.where(inputs["menu_mask"], logits[None, :], -1e9)  # [B, M]
    logp = jax.nn.log_softmax(logits, axis=-1)
    chosen = jnp.take_along_axis(logp, inputs["action"][:, None], axis=-1)[:, 0]
    return upd.PolicyOut(logp=chosen, dist=logp, dist_mask=inputs["menu_mask"])


@pytest.mark.parametrize("reply_only", [False, True])
def test_frozen_trunk_update_equals_full_forward_update(tiny_model, reply_only):
    """With adapters on the top layer only, the update that computes the frozen trunk once per
    round (`LetterPolicy(frozen_layers=1)` + its `prepare`) equals the one that runs every
    forward from the embeddings; under `lora.scope=reply` too (the prompt then continues a cache
    from the trunk, and the reply's chunk continues that cache)."""
    from omjax.models import lora as lora_lib
    from omjax.train.policy import LetterPolicy

    m, n_agents, b, t, width = tiny_model, 2, 8, 12, 4
    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "v"))
    shapes = [s if i == 1 else {} for i, s in enumerate(m.family.lora_shapes(m.config))]
    bank = lora_lib.init_lora(jax.random.key(9), shapes, lcfg, n_agents=n_agents)
    bank = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(10), x.shape), bank)
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, m.config.vocab_size, (n_agents, b, t)).astype(np.int32)
    mask = np.ones_like(tokens)
    mask[:, ::2, :4] = 0  # left padding on every other row
    mask[:, :, -1] = 2  # the last token is the one state branch (`policy.state_line=none`: `choice:`)
    inputs = {"tokens": tokens, "mask": mask,
              "label_mask": np.zeros((n_agents, b, 1, 1), bool), "end": np.zeros((n_agents, b, 1), np.int32),
              "letters": rng.integers(5, m.config.vocab_size, (n_agents, b, width)).astype(np.int32),
              "menu_mask": np.ones((n_agents, b, width), bool),
              "state": np.zeros((n_agents, b), np.int32),
              "action": rng.integers(0, width, (n_agents, b)).astype(np.int32)}
    valid = np.arange(b)[None] < np.asarray([8, 5])[:, None]
    batch = upd.DecisionBatch(inputs=jax.tree.map(jnp.asarray, inputs),
                              advantage=jnp.asarray(np.where(valid, rng.normal(size=(n_agents, b)), 0.0), jnp.float32),
                              valid=jnp.asarray(valid))
    settings = upd.UpdateSettings(clip_eps=0.2, kl_coef=0.05, epochs=2, minibatch_size=4, kl_kind="exact")
    opt = upd.make_optimizer(1e-2, 1.0)
    keys = jax.random.split(jax.random.key(11), n_agents)
    outs = []
    for frozen in (0, 1):
        policy = LetterPolicy(m.family, m.config, lcfg.scale, 0.9, remat=False, frozen_layers=frozen,
                              reply_only=reply_only)
        update = upd.make_bank_update(policy.policy_fn, opt, settings, policy.prepare)
        prepared = policy.prepare(m.params, jax.tree.map(lambda x: jnp.asarray(x[0]), inputs))
        # The frozen path really starts from a trunk (else this test would compare a path to itself).
        assert ("trunk" in prepared) == bool(frozen) and (not frozen or prepared["trunk"].n_layers == 1)
        outs.append(update(m.params, bank, upd.init_opt_state(opt, bank), batch, keys, 2))
    (bank0, _, m0), (bank1, _, m1) = outs
    moved = max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(bank0), jax.tree.leaves(bank)))
    assert moved > 1e-4
    for x, y in zip(jax.tree.leaves(bank0), jax.tree.leaves(bank1)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(m0.loss), np.asarray(m1.loss), rtol=1e-4, atol=1e-6)


def test_objectives_that_read_every_entry_refuse_a_batch_without_them():
    """The paper's clip ignores per-entry advantages; `target` needs them and says so in one line."""
    batch = make_batches(jax.random.key(21), N_AGENTS, B, [B] * N_AGENTS)
    keys = jax.random.split(jax.random.key(22), N_AGENTS)
    bank = zero_bank()
    target = upd.UpdateSettings(clip_eps=0.2, kl_coef=0.5, epochs=1, minibatch_size=4, kl_kind="exact",
                                objective="target")
    with pytest.raises(ValueError, match="objective 'target' reads every menu entry's advantage"):
        upd.make_bank_update(menu_policy, OPT, target)(W0, bank, upd.init_opt_state(OPT, bank), batch, keys)
    favour = jnp.zeros((N_AGENTS, B, M)).at[:, :, 1].set(1.0)
    plain, _, _ = BANK_UPDATE(W0, bank, upd.init_opt_state(OPT, bank), batch, keys)
    with_entries, _, _ = BANK_UPDATE(W0, bank, upd.init_opt_state(OPT, bank), batch.replace(option_advantage=favour),
                                     keys)
    for x, y in zip(jax.tree.leaves(plain), jax.tree.leaves(with_entries)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_target_objective_converges_to_the_regularised_optimum():
    """`objective=target` regresses each decision's menu distribution onto pi* ∝ pi_ref exp(A / beta):
    under a base with a strong letter habit (slot 0 at 0.98 of full menus) and the good slot
    elsewhere, the adapter ends at pi* (its loss, KL(pi* || pi), near 0), with no clipping and
    no separate KL term; `clip` stays the default."""
    habit = jnp.array([5.0, 0.0, 0.0, 0.0])
    adv = jnp.array([-0.5, 0.0, 1.0, 0.0])
    batch = make_batches(jax.random.key(31), 1, 8, [8])
    batch = batch.replace(advantage=jnp.zeros_like(batch.advantage), inputs={**batch.inputs, "features": None},
                          option_advantage=jnp.broadcast_to(adv, (1, 8, M)))
    bank = {"b": jnp.zeros((1, M))}
    opt = upd.make_optimizer(0.05, 1.0)
    assert upd.UpdateSettings(clip_eps=0.2, kl_coef=0.5, epochs=1, minibatch_size=4, kl_kind="exact").objective == "clip"
    settings = upd.UpdateSettings(clip_eps=0.2, kl_coef=0.5, epochs=60, minibatch_size=4, kl_kind="exact",
                                  objective="target")
    new, _, m = upd.make_bank_update(letter_habit_policy, opt, settings)(habit, bank, upd.init_opt_state(opt, bank),
                                                                         batch, jax.random.split(jax.random.key(32), 1))
    star = jax.nn.softmax(habit + adv / 0.5)  # full menus: slot 2 at 0.115 (base 0.0066)
    pi = jax.nn.softmax(habit + new["b"][0])
    np.testing.assert_allclose(pi, star, atol=0.02)
    assert float(m.loss[0, 0].mean()) > 0.15 and float(m.loss[0, -1].mean()) < 0.01
    np.testing.assert_array_equal(np.asarray(m.clip_frac), 0.0)


@pytest.mark.parametrize("backbone", [None, pytest.param("qwen3.5-2b", marks=pytest.mark.slow),
                                      pytest.param("gemma-4-e2b-it", marks=pytest.mark.slow)])
def test_shared_prefix_update_equals_whole_prompts(tiny_model, backbone):
    """The update that runs each minibatch's shared prompt prefix once, under the adapter, and the
    rows only after it (`update_inputs` with a known prefix, `LetterPolicy.policy_fn` with
    `prefix_tokens`) gives the same scores, gradients, losses and adapters as whole prompts,
    within 1e-5 (float32, two epochs of plain SGD so adapter differences are gradient ones). On
    the tiny Llama by default; with `-m slow` also on test-size random Qwen3.5 (recurrent layers,
    one row per state branch) and gemma-4 (sliding windows, shared KV)."""
    import dataclasses

    import optax

    from omjax.bench.round import tiny_tokenizer
    from omjax.config import PolicyConfig
    from omjax.models import configs
    from omjax.models import lora as lora_lib
    from omjax.options.menu import MenuItem
    from omjax.train.policy import LetterPolicy
    from omjax.train.rollout import Decider, Decision, update_inputs

    m = tiny_model if backbone is None else dataclasses.replace(
        configs.random_model(backbone, jnp.float32, tiny=True, scale=0.2), tokenizer=tiny_tokenizer())
    # Gated DeltaNet continues the prefix's recurrent state in another summation order than one
    # pass over the whole prompt: float32 scores, gradients (of order 1 at these weights) and
    # adapters agree to 1e-4 there (within 1e-5 on the other families).
    tol = 1e-4 if backbone == "qwen3.5-2b" else 1e-5
    lcfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "k", "v", "o"))
    bank = lora_lib.init_lora(jax.random.key(3), m.family.lora_shapes(m.config), lcfg, n_agents=2)
    bank = jax.tree.map(lambda x: x + 0.1 * jax.random.normal(jax.random.key(4), x.shape), bank)
    policy = LetterPolicy(m.family, m.config, lcfg.scale, 0.9, remat=False)
    system = "you are agent A . pick option"
    users = ["menu A , B", "state : pick now", "wait , pay , drop now", "menu ( C ) you are player B",
             "drop", "pay now , agent", "option A . option B . option C"]
    rng = np.random.default_rng(5)
    branches = Decider(policy, m.tokenizer, PolicyConfig()).branches(("A", "B C"))
    items = lambda n: [MenuItem(chr(65 + j), j, f"o{j}", None, f"o{j}") for j in range(n)]
    decisions = [Decision(rollout=i % 2, agent=i % 2, step=i, prompt_ids=[], reply_ids=[], reply="",
                          menu=items(2 + i % 3), action=int(rng.integers(0, 2)), logp=float(-rng.uniform(0.5, 2)),
                          parsed=True, branches=branches, state=i % 2) for i in range(len(users))]
    batches = []
    for knows_prefix in (False, True):
        decider = Decider(policy, m.tokenizer, PolicyConfig())
        for d, user in zip(decisions, users):
            d.prompt_ids = decider.encode(decider.prompt(system, user))
        if knows_prefix:
            prefix = decider.prefix_ids(system)  # what a round's `Decider.prefill` caches
            assert 4 <= len(prefix) < min(len(d.prompt_ids) for d in decisions)
        batches.append(update_inputs(decisions, policy, decider, np.array([0.7, -0.7]), 2, lambda d: d.agent,
                                     minibatch_size=2))
    whole, split = (jax.tree.map(jnp.asarray, b) for b in batches)
    assert "prefix_tokens" not in whole.inputs and split.inputs["prefix_tokens"].shape[:2] == (2, 4)
    real = lambda x: np.asarray(x > 0).sum(-1)  # real tokens per row
    valid = np.asarray(whole.valid)
    assert (real(split.inputs["mask"]) + real(split.inputs["prefix_mask"]) == real(whole.inputs["mask"]))[valid].all()
    assert (real(split.inputs["prefix_mask"]) == len(prefix))[valid].all()

    # Scores and gradients of agent 0's rows under its adapter.
    one = lambda x: jax.tree.map(lambda v: v[0], x)
    lora0 = one(bank)
    score = jax.jit(lambda lo, inputs: policy.policy_fn(m.params, lo, inputs))
    for field in ("logp", "dist"):
        np.testing.assert_allclose(np.asarray(getattr(score(lora0, one(split.inputs)), field)),
                                   np.asarray(getattr(score(lora0, one(whole.inputs)), field)), atol=tol)
    grad = jax.jit(lambda inputs: jax.grad(lambda lo: jnp.sum(score(lo, inputs).logp * one(whole.valid)))(lora0))
    g_split, g_whole = grad(one(split.inputs)), grad(one(whole.inputs))
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(g_whole)) > 1e-3
    for a, b in zip(jax.tree.leaves(g_split), jax.tree.leaves(g_whole)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol)

    # The whole update: both adapters, two epochs.
    settings = upd.UpdateSettings(clip_eps=0.2, kl_coef=0.05, epochs=2, minibatch_size=2, kl_kind="exact")
    opt = optax.sgd(0.01)
    update = upd.make_bank_update(policy.policy_fn, opt, settings, policy.prepare)
    keys = jax.random.split(jax.random.key(6), 2)
    outs = [update(m.params, bank, upd.init_opt_state(opt, bank), b, keys) for b in (whole, split)]
    (bank_w, _, m_w), (bank_s, _, m_s) = outs
    assert max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(bank_w), jax.tree.leaves(bank))) > 1e-4
    for a, b in zip(jax.tree.leaves(bank_s), jax.tree.leaves(bank_w)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=tol)
    for field in ("loss", "kl", "ratio", "grad_norm"):
        np.testing.assert_allclose(np.asarray(getattr(m_s, field)), np.asarray(getattr(m_w, field)), atol=tol)
