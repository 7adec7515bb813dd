"""Letter mode's joint (state label, menu letter) policy on a tiny random Llama: the branch block
scored in one forward equals each branch run alone, the joint distribution is normalised, the
label is the model's, the KL is exact, and the prefix-cached rollout path decides exactly as the
whole-prompt path."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from omjax.config import LoRAConfig, PolicyConfig
from omjax.models import inference, lora
from omjax.options.menu import MenuItem
from omjax.prompts import Memory, format_reply, render_chat
from omjax.train import grpo
from omjax.train.policy import LetterPolicy, SamplePolicy
from omjax.train.rollout import Decider, Request

from bandit import MenuBandit

LABELS = ("now", "wait", "drop")
TEMPERATURE = 0.8


def bank_of(model, n, seed, bump):
    cfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "v", "up"))
    bank = lora.init_lora(jax.random.PRNGKey(seed), model.family.lora_shapes(model.config), cfg, n)
    return jax.tree.map(lambda x: x + bump, bank), cfg.scale


def requests(decider, game, n_agents, menus=(4, 3, 2)):
    out = []
    for i in range(n_agents):
        size = menus[i % len(menus)]
        menu = [MenuItem(chr(65 + j), j, f"opt{j}", None, f"pick option {j}") for j in range(size)]
        prompt = decider.prompt(game.system_message(), game.user_message(0, i, menu, Memory()) + " pay" * i)
        out.append(Request(0, i, menu, prompt, 0, None, adapter=i, branches=decider.state_branches(game, 0, i)))
    return out


@pytest.fixture(scope="module")
def setup(tiny_model):
    m = tiny_model
    bank, scale = bank_of(m, 3, 1, 0.05)
    policy = LetterPolicy(m.family, m.config, scale, TEMPERATURE, remat=False)
    game = MenuBandit(3, 2, labels=LABELS)
    game.reset([0])
    decider = Decider(policy, m.tokenizer, PolicyConfig(state_line="model"))
    return m, policy, bank, game, decider


def inputs_of(decider, reqs):
    """Whole-prompt letter-mode inputs [N, ...] of `reqs`, and their prompt ids."""
    prompts = [decider.encode(r.prompt) for r in reqs]
    tokens, mask = inference.left_pad(prompts, inference.bucket(max(map(len, prompts)), 64), decider.pad_id)
    return decider.letter_inputs([r.menu for r in reqs], [r.branches for r in reqs], tokens, mask), prompts


def brute_joint(m, policy, lora_tree, prompt, branches, letters, menu_size):
    """log p(label, letter) from one plain forward per branch: prompt + branch tokens, no
    branch masks, no cache."""
    out = np.zeros((len(branches.tokens), menu_size))
    label_scores = []
    for l, (ids, k) in enumerate(zip(branches.tokens, branches.label_len)):
        seq = jnp.asarray([prompt + list(ids)])
        logits, _ = m.family.forward(m.params, m.config, seq, lora=lora_tree, lora_scale=policy.lora_scale)
        logp = jax.nn.log_softmax(logits[0] / TEMPERATURE, axis=-1)  # [T, V]
        t0 = len(prompt)
        label_scores.append(sum(float(logp[t0 - 1 + j, ids[j]]) for j in range(k)))
        letter = jax.nn.log_softmax(logits[0, -1, jnp.asarray(letters)] / TEMPERATURE)
        out[l] = np.asarray(letter)
    label = np.asarray(jax.nn.log_softmax(jnp.asarray(label_scores)))
    return label[:, None] + out


def decide_both_ways(m, decider, bank, reqs, prefix, seed):
    """The decisions of `reqs` after the cached `prefix` and from whole prompts, checked equal."""
    key = jax.random.split(jax.random.PRNGKey(seed), len(reqs))
    cached = decider.decide(m.params, bank, reqs, key, prefix)
    whole = decider.decide(m.params, bank, reqs, key)
    assert [(o.state, o.action) for o in cached] == [(o.state, o.action) for o in whole]
    np.testing.assert_allclose([o.logp for o in cached], [o.logp for o in whole], atol=1e-5)
    return cached, whole


def brute_reply_joint(m, policy, lora_tree, prompt, branches, letters):
    """log p(label, letter) with the adapter on the reply only (`lora.scope=reply`): the prompt
    alone on the base into a cache, then each branch alone with the adapter on a fresh copy (no
    padding, no branch masks, no trunk)."""
    out, label_scores = [], []
    for ids, k in zip(branches.tokens, branches.label_len):
        cache = m.family.init_cache(m.config, 1, len(prompt) + len(ids))
        last, cache = m.family.forward(m.params, m.config, jnp.asarray([prompt]), cache=cache, last_only=True)
        rest, _ = m.family.forward(m.params, m.config, jnp.asarray([list(ids)]), lora=lora_tree,
                                   lora_scale=policy.lora_scale, cache=cache)
        logp = jax.nn.log_softmax(jnp.concatenate([last, rest], axis=1)[0] / TEMPERATURE, axis=-1)  # [1 + W, V]
        label_scores.append(sum(float(logp[j, ids[j]]) for j in range(k)))
        out.append(np.asarray(jax.nn.log_softmax(logp[-1, jnp.asarray(letters)] * 1.0)))
    label = np.asarray(jax.nn.log_softmax(jnp.asarray(label_scores)))
    return label[:, None] + np.stack(out)


@pytest.mark.slow  # a research extension's end-to-end check (README: Test)
def test_reply_scope_adapts_the_reply_only_and_its_cache_is_the_bases(setup):
    """`lora.scope=reply`: the joint equals scoring each branch alone after a prompt run on the
    base; the adapter moves it (it differs from the base and from `scope=all`); without an
    adapter both scopes agree; the shared-prefix cache is the base's for every adapter and the
    cached rollout path decides exactly as whole prompts."""
    m, policy, bank, game, _ = setup
    reply = LetterPolicy(m.family, m.config, policy.lora_scale, TEMPERATURE, remat=False, reply_only=True)
    decider = Decider(reply, m.tokenizer, PolicyConfig(state_line="model"))
    reqs = requests(decider, game, 3)
    inputs, prompts = inputs_of(decider, reqs)
    inputs = {k: jnp.asarray(v) for k, v in inputs.items()}
    base_joint = np.asarray(reply.joint_logp(m.params, None, inputs))
    np.testing.assert_allclose(base_joint, np.asarray(policy.joint_logp(m.params, None, inputs)), atol=2e-5)
    for a, r in enumerate(reqs):
        one = {k: v[a:a + 1] for k, v in inputs.items()}
        ad = lora.agent(bank, a)
        joint = np.asarray(reply.joint_logp(m.params, ad, one))[0]
        n = len(r.menu)
        expect = brute_reply_joint(m, reply, ad, prompts[a], r.branches, decider.letter_ids([it.letter for it in r.menu]))
        np.testing.assert_allclose(joint[:, :n], expect, atol=2e-5)
        assert abs(np.exp(joint[:, :n]).sum() - 1) < 1e-5
        assert np.abs(joint - base_joint[a]).max() > 1e-3
        assert np.abs(joint - np.asarray(policy.joint_logp(m.params, ad, one))[0]).max() > 1e-3
    # The update's `prepare` keeps the prompt's cache; scoring from it is scoring from scratch.
    prepared = reply.prepare(m.params, inputs)
    assert prepared["prompt_logits"].shape == (3, 1, m.config.vocab_size)
    for a in range(3):
        ad = lora.agent(bank, a)
        np.testing.assert_allclose(np.asarray(reply.joint_logp(m.params, ad, prepared)),
                                   np.asarray(reply.joint_logp(m.params, ad, inputs)), atol=2e-5)
    prefix = decider.prefill(m.params, bank, game.system_message())
    base_prefix = policy.prefill(m.params, jax.tree.map(jnp.zeros_like, bank), prefix.ids)
    for x, y in zip(jax.tree.leaves(prefix.caches), jax.tree.leaves(base_prefix)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)
    for seed in range(4):
        decide_both_ways(m, decider, bank, reqs, prefix, seed)


@pytest.mark.parametrize("scope,top", [pytest.param("reply", 0, marks=pytest.mark.slow),
                                       pytest.param("reply", 1, marks=pytest.mark.slow), ("all", 0)])
def test_realign_draws_from_ref_times_ratio_power_and_leaves_the_base_alone(setup, scope, top):
    """`policy.realign` (DeRa): the realigned block logits are `ref + lam (adapted - ref)`, so given
    its label a letter is drawn from pi_ref^(1 - lam) pi^lam over the menu, computed here from two
    plain `joint_logp` calls (the base's and the policy's), with the base's pass started from the
    adapted pass's trunk when `top` layers are adapted; lam = 1 is the policy; a zero adapter's
    realigned draws are the base's, bit for bit; `joint_logp` (the update's) is never realigned."""
    m, _, _, game, _ = setup
    n_layers = m.config.num_layers
    cfg = LoRAConfig(rank=2, alpha=4.0, targets=("q", "v", "up"), top_layers=top)
    fresh = lora.init_lora(jax.random.PRNGKey(3), m.family.lora_shapes(m.config), cfg, 3)
    bank = jax.tree.map(lambda x: x + 0.05, fresh)
    lam = 3.0
    kw = dict(remat=False, frozen_layers=n_layers - top if top else 0, reply_only=scope == "reply")
    plain = LetterPolicy(m.family, m.config, cfg.scale, TEMPERATURE, **kw)
    realigned = LetterPolicy(m.family, m.config, cfg.scale, TEMPERATURE, realign=lam, **kw)
    decider = Decider(realigned, m.tokenizer, PolicyConfig(state_line="model", realign=lam))
    reqs = requests(decider, game, 3)
    inputs, _ = inputs_of(decider, reqs)
    inputs = {k: jnp.asarray(v) for k, v in inputs.items()}
    for a, r in enumerate(reqs):
        one = {k: v[a:a + 1] for k, v in inputs.items()}
        ad = lora.agent(bank, a)
        n = len(r.menu)
        ref = np.asarray(plain.joint_logp(m.params, None, one))[0, :, :n]  # [L, n]
        pol = np.asarray(plain.joint_logp(m.params, ad, one))[0, :, :n]
        got = np.asarray(plain.joint_logp(m.params, ad, one, realign=lam))[0, :, :n]
        np.testing.assert_allclose(np.asarray(realigned.joint_logp(m.params, ad, one)), np.asarray(
            plain.joint_logp(m.params, ad, one)), atol=1e-6)  # the update's scores: the policy's own
        np.testing.assert_allclose(np.asarray(plain.joint_logp(m.params, ad, one, realign=1.0))[0, :, :n], pol,
                                   atol=1e-6)
        letters = lambda j: j - jax.nn.logsumexp(j, axis=-1, keepdims=True)  # letter | label
        # Temperature divides the realigned logits: pi_ref^(1 - lam) pi^lam is taken at T = 1.
        expect = letters((1 - lam) * ref * TEMPERATURE + lam * pol * TEMPERATURE)
        np.testing.assert_allclose(np.asarray(letters(got * TEMPERATURE)), np.asarray(expect), atol=1e-4)
        assert np.abs(np.asarray(letters(pol * TEMPERATURE) - letters(ref * TEMPERATURE))).max() > 1e-5  # it moves
        assert abs(np.exp(got).sum() - 1) < 1e-5
    keys = jax.random.split(jax.random.PRNGKey(0), len(reqs))
    for a, o in enumerate(decider.decide(m.params, bank, reqs, keys)):  # the rollout path draws realigned
        one = {k: v[a:a + 1] for k, v in inputs.items()}
        joint = np.asarray(plain.joint_logp(m.params, lora.agent(bank, a), one, realign=lam))[0]
        assert o.logp == pytest.approx(float(joint[o.state, o.action]), abs=1e-4)
    zero = jax.tree.map(jnp.zeros_like, bank)  # the frozen base as a bank
    plain_decider = Decider(plain, m.tokenizer, PolicyConfig(state_line="model"))
    base_draws = plain_decider.decide(m.params, zero, reqs, keys)
    zero_draws = decider.decide(m.params, zero, reqs, keys)
    assert [(o.state, o.action, o.logp) for o in zero_draws] == [(o.state, o.action, o.logp) for o in base_draws]


def test_branch_block_scores_each_branch_as_if_alone_and_sums_to_one(setup):
    m, policy, bank, game, decider = setup
    reqs = requests(decider, game, 3)
    inputs, prompts = inputs_of(decider, reqs)
    for a, r in enumerate(reqs):
        one = {k: jnp.asarray(v[a:a + 1]) for k, v in inputs.items()}
        ad = lora.agent(bank, a)
        joint = np.asarray(policy.joint_logp(m.params, ad, one))[0]  # [L, M]
        n = len(r.menu)
        expect = brute_joint(m, policy, ad, prompts[a], r.branches, decider.letter_ids([it.letter for it in r.menu]), n)
        np.testing.assert_allclose(joint[:, :n], expect, atol=2e-5)
        assert np.all(joint[:, n:] == 0)
        assert abs(np.exp(joint[:, :n]).sum() - 1) < 1e-5
        label_marginal = np.exp(joint[:, :n]).sum(axis=1)
        assert np.all(label_marginal > 0.01)  # every label is a live choice of the model
        # The layout of recurrent families (one prompt copy per branch) scores the same.
        policy.one_row_per_branch = True
        try:
            rows = np.asarray(policy.joint_logp(m.params, ad, one))[0]
        finally:
            policy.one_row_per_branch = False
        np.testing.assert_allclose(rows, joint, atol=2e-5)


def test_prefix_cache_decides_as_whole_prompts_and_label_is_the_models(setup):
    m, policy, bank, game, decider = setup
    reqs = requests(decider, game, 3) * 2
    prefix = decider.prefill(m.params, bank, game.system_message())
    assert len(prefix.ids) > 4
    states = set()
    for seed in range(6):
        cached, whole = decide_both_ways(m, decider, bank, reqs, prefix, seed)
        assert [o.prompt_ids for o in cached] == [o.prompt_ids for o in whole]
        states |= {o.state for o in cached}
        for o, r in zip(cached, reqs):
            assert o.reply == f"state: {LABELS[o.state]}\nchoice: {r.menu[o.action].letter}" and o.parsed
    # The bandit's true state is always LABELS[0]; the model writes other labels too.
    assert states - {0}


def test_a_draw_does_not_depend_on_the_menus_batched_with_it(setup):
    """Decisions batched with a longer menu (the call pads every menu to 16 slots instead of 8,
    as when the seeds of a group play different libraries) draw what they draw alone."""
    m, policy, bank, game, decider = setup
    reqs = requests(decider, game, 3)  # menus of 4, 3 and 2 entries: 8 slots
    wide = requests(decider, game, 1, menus=(12,))
    prefix = decider.prefill(m.params, bank, game.system_message())
    for seed in range(8):
        keys = jax.random.split(jax.random.PRNGKey(seed), 4)
        alone = decider.decide(m.params, bank, reqs, keys[:3], prefix)
        batched = decider.decide(m.params, bank, reqs + wide, keys, prefix)[:3]
        assert [(o.state, o.action) for o in batched] == [(o.state, o.action) for o in alone]
        np.testing.assert_allclose([o.logp for o in batched], [o.logp for o in alone], atol=1e-5)


def test_prompts_of_very_different_lengths_split_into_two_calls_and_decide_as_alone(setup):
    m, policy, bank, game, decider = setup
    reqs = requests(decider, game, 4)
    long = [dataclasses.replace(r, prompt=decider.prompt(game.system_message(),
                                                          game.user_message(0, r.agent, r.menu, Memory()) + " pay" * 150))
            for r in reqs[2:]]
    reqs = [reqs[0], long[0], reqs[1], long[1]]
    prefix = decider.prefill(m.params, bank, game.system_message())
    lengths = [len(decider.encode(r.prompt)) - len(prefix.ids) for r in reqs]
    groups = inference.length_groups(lengths, 16)
    assert [g.tolist() for g in groups] == [[0, 2], [1, 3]]
    key = jax.random.split(jax.random.PRNGKey(7), len(reqs))
    together = decider.decide(m.params, bank, reqs, key, prefix)
    for j, r in enumerate(reqs):
        (alone,) = decider.decide(m.params, bank, [r], key[j:j + 1], prefix)
        assert (together[j].state, together[j].action, together[j].prompt_ids) == (alone.state, alone.action,
                                                                                  alone.prompt_ids)
        np.testing.assert_allclose(together[j].logp, alone.logp, atol=1e-5)


def test_length_groups_split_only_when_it_saves_padding():
    assert [g.tolist() for g in inference.length_groups([300, 700, 310, 690], 24)] == [[0, 2], [1, 3]]
    assert [g.tolist() for g in inference.length_groups([300, 305, 310, 315], 24)] == [[0, 1, 2, 3]]
    assert [g.tolist() for g in inference.length_groups([5], 24)] == [[0]]
    # Cleanup's suffix lengths after the shared prefix (the bench's 8 real prompts): two calls
    # would pad 25 % of 4032 slots, three 16 % of 3584; a fourth would save under 1/16.
    cleanup = [559, 157, 296, 284, 157, 567, 430, 385]
    groups = inference.length_groups(cleanup, 24)
    assert [g.tolist() for g in groups] == [[1, 4], [2, 3, 6, 7], [0, 5]]
    assert [g.tolist() for g in inference.length_groups(cleanup, 24, max_calls=2)] == [[1, 2, 3, 4], [0, 5, 6, 7]]
    lengths = np.random.default_rng(0).integers(100, 800, 50)
    groups = inference.length_groups(lengths, 24)
    assert 1 <= len(groups) <= 4 and sorted(np.concatenate(groups).tolist()) == list(range(50))
    assert all(lengths[a].max() <= lengths[b].min() for a, b in zip(groups, groups[1:]))


def test_joint_kl_is_exact_against_brute_force_enumeration(setup):
    m, policy, bank, game, decider = setup
    reqs = requests(decider, game, 2)
    inputs, prompts = inputs_of(decider, reqs)
    inputs = {k: jnp.asarray(v) for k, v in inputs.items()}
    inputs["state"] = jnp.asarray([1, 2], jnp.int32)
    inputs["action"] = jnp.asarray([0, 2], jnp.int32)
    ad = lora.agent(bank, 0)
    cur, ref = policy.policy_fn(m.params, ad, inputs), policy.policy_fn(m.params, None, inputs)
    kl = np.asarray(grpo.kl_exact(cur.dist, ref.dist, cur.dist_mask))
    for j, r in enumerate(reqs):
        letters = decider.letter_ids([it.letter for it in r.menu])
        p = brute_joint(m, policy, ad, prompts[j], r.branches, letters, len(r.menu))
        q = brute_joint(m, policy, None, prompts[j], r.branches, letters, len(r.menu))
        expect = float(np.sum(np.exp(p) * (p - q)))
        assert expect > 1e-6
        np.testing.assert_allclose(kl[j], expect, rtol=1e-3, atol=1e-7)
        np.testing.assert_allclose(float(cur.logp[j]), p[int(inputs["state"][j]), int(inputs["action"][j])], atol=2e-5)


def test_oracle_and_none_state_lines_score_one_branch(setup):
    m, policy, bank, game, _ = setup
    for line, prompt_end, label in (("oracle", "state:", LABELS[0]), ("none", "", None)):
        decider = Decider(policy, m.tokenizer, PolicyConfig(state_line=line))
        reqs = requests(decider, game, 2)
        assert reqs[0].prompt.endswith(prompt_end) and reqs[0].branches.labels == (label,)
        # The tokens read are those of the whole reply prefix: under `oracle`, exactly what the
        # letter mode read before the state line was the model's (so its arithmetic is unchanged).
        user = game.user_message(0, 0, reqs[0].menu, Memory())
        whole = decider.encode(render_chat(m.tokenizer, game.system_message(), user, format_reply(label)))
        assert decider.encode(reqs[0].prompt) + list(reqs[0].branches.tokens[0]) == whole
        out = decider.decide(m.params, bank, reqs, jax.random.split(jax.random.PRNGKey(0), len(reqs)),
                             decider.prefill(m.params, bank, game.system_message()))
        assert all(o.state == 0 for o in out)
        assert out[0].reply.startswith("state: now\nchoice:" if label else "choice:")


def test_sample_mode_with_prefix_cache_generates_as_whole_prompts(tiny_model):
    m = tiny_model
    bank, scale = bank_of(m, 2, 2, 0.05)
    policy = SamplePolicy(m.family, m.config, scale, 1.0, 6, [m.tokenizer.eos_token_id], 0, remat=False)
    game = MenuBandit(2, 2)
    game.reset([0])
    decider = Decider(policy, m.tokenizer, PolicyConfig(decision_mode="sample"))
    reqs = requests(decider, game, 2)
    key = jax.random.split(jax.random.PRNGKey(3), len(reqs))
    cached = decider.decide(m.params, bank, reqs, key,
                            decider.prefill(m.params, bank, game.system_message()))
    whole = decider.decide(m.params, bank, reqs, key)
    assert [o.reply_ids for o in cached] == [o.reply_ids for o in whole]
    np.testing.assert_allclose([o.logp for o in cached], [o.logp for o in whole], atol=1e-4)
