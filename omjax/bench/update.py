"""One PA-MAGRPO update for N agents: the trainer's bank update vs `jax.vmap` vs a Python loop.

    python -m omjax.bench update [--agents 7] [--seeds 5] [--skip-smollm2] [--smollm2-decisions 4] ...

All run the same shipped one-agent update (`omjax.train.update.make_agent_update`) on the same
random letter-mode decision batches: the trainer's `make_bank_update` (one jitted call for the
whole bank; on a CPU its adapters run in sequence inside the program), the same with `vmap`
over the adapters, and a loop that jits the one-agent update once and calls it per agent. Each
is timed after a warm-up call (compile excluded, reported separately), and the final adapters
are checked equal. The tiny backbone is also timed with a bank of seeds x agents adapters (a
multi-seed run's update). Backbones: a tiny random Llama (built with transformers, no download)
and SmolLM2-135M (the shipped GGUF).

`--trunk` times what the rollouts hand the update under `lora.top_layers` (the learning run's
setting: SmolLM2, adapters on the top 8 layers, prompts of ~850 tokens): the update that computes
the frozen trunk and the old log-probs itself (`train.reuse_trunk=false`) against the one that
starts from the rollout's trunk and log-probs (the default), same batch, same run, final adapters
checked equal.

`--scope` times the same update under `lora.scope=all` (the adapter on every token: the
backward pass runs through the whole prompt) against `lora.scope=reply` (the prompt runs once on
the frozen base into a cache, the backward pass covers the reply's branch block only), both from
the rollout's trunk, on Overcooked-shaped decisions (5 state branches of 8 tokens after the
prompt). Ends with one JSON line `{"bench": "update", ...}`.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import jax
import jax.numpy as jnp

from omjax.config import LoRAConfig
from omjax.models import load
from omjax.models import lora as lora_lib
from omjax.train.policy import LetterPolicy
from omjax.train.update import (DecisionBatch, UpdateSettings, init_opt_state, make_agent_update, make_bank_update,
                                make_optimizer)


def _tiny_llama(path: str):
    # torch and transformers only write the random checkpoint: heavy, and needed by no other path here.
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path)
    return load(path, with_tokenizer=False)


def _batch(key, n_agents: int, b: int, t: int, vocab: int, menu: int):
    k1, k2, k3 = jax.random.split(key, 3)
    inputs = {
        "tokens": jax.random.randint(k1, (n_agents, b, t), 0, vocab),
        # The last token is the one state branch (`choice:` of a reply without a state line).
        "mask": jnp.ones((n_agents, b, t), jnp.int32).at[:, :, -1].set(2),
        "label_mask": jnp.zeros((n_agents, b, 1, 1), bool),
        "end": jnp.zeros((n_agents, b, 1), jnp.int32),
        "letters": jnp.broadcast_to(jnp.arange(menu) + 5, (n_agents, b, menu)),
        "menu_mask": jnp.ones((n_agents, b, menu), bool),
        "state": jnp.zeros((n_agents, b), jnp.int32),
        "action": jax.random.randint(k2, (n_agents, b), 0, menu),
    }
    return DecisionBatch(inputs=inputs, advantage=jax.random.normal(k3, (n_agents, b)),
                         valid=jnp.ones((n_agents, b), bool))


def _timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def bench_backbone(name: str, model, n_agents: int, b: int, t: int, minibatch: int, rank: int) -> dict:
    lcfg = LoRAConfig(rank=rank, alpha=2.0 * rank, targets=("q", "v"))
    policy = LetterPolicy(model.family, model.config, lcfg.scale, temperature=0.9, remat=False)
    opt = make_optimizer(1e-3, 1.0)
    settings = UpdateSettings(clip_eps=0.2, kl_coef=0.05, epochs=2, minibatch_size=minibatch, kl_kind="exact")
    bank = lora_lib.init_lora(jax.random.PRNGKey(0), model.family.lora_shapes(model.config), lcfg, n_agents)
    # Non-zero B so that the first step already has a KL gradient, as in a later round.
    bank = jax.tree.map(lambda x: x + 0.01, bank)
    state = init_opt_state(opt, bank)
    batch = _batch(jax.random.PRNGKey(1), n_agents, b, t, model.config.vocab_size, 6)
    keys = jax.random.split(jax.random.PRNGKey(2), n_agents)

    vmapped = make_bank_update(policy.policy_fn, opt, settings, in_sequence=False)
    (v_bank, _, _), v_first = _timed(vmapped, model.params, bank, state, batch, keys)
    (v_bank, _, _), v_run = _timed(vmapped, model.params, bank, state, batch, keys)
    # The trainer's bank update on this backend (on a CPU: the adapters in sequence in one program).
    shipped = make_bank_update(policy.policy_fn, opt, settings)
    (s_bank, _, _), s_first = _timed(shipped, model.params, bank, state, batch, keys)
    (s_bank, _, _), s_run = _timed(shipped, model.params, bank, state, batch, keys)

    one = jax.jit(make_agent_update(policy.policy_fn, opt, settings))
    pick = lambda tree, i: jax.tree.map(lambda x: x[i], tree)

    def loop(params, bank, state, batch, keys):
        return [one(params, pick(bank, i), pick(state, i), pick(batch, i), keys[i])[0] for i in range(n_agents)]

    l_banks, l_first = _timed(loop, model.params, bank, state, batch, keys)
    l_banks, l_run = _timed(loop, model.params, bank, state, batch, keys)
    err = 0.0
    for i, l in enumerate(l_banks):
        for bank_i in (v_bank, s_bank):
            for a, c in zip(jax.tree.leaves(pick(bank_i, i)), jax.tree.leaves(l)):
                err = max(err, float(jnp.max(jnp.abs(a - c))))
    tokens = n_agents * b * t
    row = {
        "backbone": name, "agents": n_agents, "decisions_per_agent": b, "tokens_per_decision": t,
        "vmap_s": v_run, "loop_s": l_run, "loop_over_vmap": l_run / v_run,
        "bank_s": s_run, "loop_over_bank": l_run / s_run, "bank_compile_s": s_first - s_run,
        "vmap_compile_s": v_first - v_run, "loop_compile_s": l_first - l_run,
        "vmap_tokens_per_s": tokens * settings.epochs / v_run, "max_abs_diff": err,
    }
    print(f"{name:>14}: trainer's bank update {s_run:8.3f} s | vmapped {v_run:8.3f} s | python loop {l_run:8.3f} s "
          f"| loop/bank {l_run / s_run:5.2f}x loop/vmap {l_run / v_run:5.2f}x "
          f"| compile vmap {v_first - v_run:6.1f} s loop {l_first - l_run:6.1f} s | max |diff| {err:.2e}", flush=True)
    return row


def _top_bank(model, n_agents: int, top_layers: int):
    """The learning runs' adapters (rank 16 on q, k, v, o of the top layers), B moved off zero:
    (LoRA config, frozen layer count, bank)."""
    lcfg = LoRAConfig(rank=16, alpha=32.0, targets=("q", "k", "v", "o"), top_layers=top_layers)
    frozen = model.config.num_layers - top_layers
    shapes = [s if i >= frozen else {} for i, s in enumerate(model.family.lora_shapes(model.config))]
    bank = lora_lib.init_lora(jax.random.PRNGKey(0), shapes, lcfg, n_agents)
    return lcfg, frozen, jax.tree.map(lambda x: x + 0.01, bank)


def bench_trunk(model, n_agents: int, b: int, t: int, top_layers: int, minibatch: int) -> dict:
    """The update with the frozen trunk and old log-probs computed inside vs handed in."""
    lcfg, frozen, bank = _top_bank(model, n_agents, top_layers)
    policy = LetterPolicy(model.family, model.config, lcfg.scale, temperature=1.0, remat=False, frozen_layers=frozen)
    opt = make_optimizer(1e-3, 1.0)
    settings = UpdateSettings(clip_eps=0.2, kl_coef=0.01, epochs=2, minibatch_size=minibatch, kl_kind="exact")
    state = init_opt_state(opt, bank)
    batch = _batch(jax.random.PRNGKey(1), n_agents, b, t, model.config.vocab_size, 6)
    keys = jax.random.split(jax.random.PRNGKey(2), n_agents)
    update = make_bank_update(policy.policy_fn, opt, settings, policy.prepare)
    # What the rollouts would have kept: the trunk, and the log-probs under the adapters that acted.
    prepare = jax.jit(jax.vmap(lambda x: policy.prepare(model.params, x)))
    score = jax.jit(jax.vmap(lambda lo, x: policy.policy_fn(model.params, lo, x).logp))
    handed = batch.replace(inputs=prepare(batch.inputs), old_logp=score(bank, batch.inputs))
    runs = {}
    for name, one in (("recomputed", batch), ("handed_in", handed)):
        _, first = _timed(update, model.params, bank, state, one, keys)
        out, run = _timed(update, model.params, bank, state, one, keys)
        runs[name] = (out[0], first, run)
    err = max(float(jnp.max(jnp.abs(a - c))) for a, c in zip(jax.tree.leaves(runs["recomputed"][0]),
                                                             jax.tree.leaves(runs["handed_in"][0])))
    slow, fast = runs["recomputed"][2], runs["handed_in"][2]
    row = {"backbone": "smollm2-135m", "agents": n_agents, "decisions_per_agent": b, "tokens_per_decision": t,
           "top_layers": top_layers, "recomputed_s": slow, "handed_in_s": fast, "speedup": slow / fast,
           "max_abs_diff": err}
    print(f"  trunk reuse: update computing trunk + old log-probs {slow:8.2f} s | starting from the rollout's "
          f"{fast:8.2f} s | {slow / fast:5.2f}x | max |diff| {err:.2e}", flush=True)
    return row


def _branch_batch(key, n_agents: int, b: int, t: int, vocab: int, menu: int, labels: int, width: int):
    """`_batch` with a letter-mode branch block after the t prompt tokens: `labels` state
    branches of `width` slots, each a 2-token label, then `choice:` (4 tokens in all)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    used = 4
    slot = jnp.arange(width) < used                                              # [W]
    block_mask = jnp.where(slot[None], 2 + jnp.arange(labels)[:, None], 0).reshape(-1)  # [L*W]
    mask = jnp.concatenate([jnp.ones((t,), jnp.int32), block_mask.astype(jnp.int32)])
    inputs = {
        "tokens": jax.random.randint(k1, (n_agents, b, t + labels * width), 0, vocab),
        "mask": jnp.broadcast_to(mask, (n_agents, b, t + labels * width)),
        "label_mask": jnp.broadcast_to(jnp.arange(width) < 2, (n_agents, b, labels, width)),
        "end": jnp.broadcast_to(jnp.arange(labels) * width + used - 1, (n_agents, b, labels)).astype(jnp.int32),
        "letters": jnp.broadcast_to(jnp.arange(menu) + 5, (n_agents, b, menu)),
        "menu_mask": jnp.ones((n_agents, b, menu), bool),
        "state": jax.random.randint(k4, (n_agents, b), 0, labels),
        "action": jax.random.randint(k2, (n_agents, b), 0, menu),
    }
    return DecisionBatch(inputs=inputs, advantage=jax.random.normal(k3, (n_agents, b)),
                         valid=jnp.ones((n_agents, b), bool))


def bench_scope(model, n_agents: int, b: int, t: int, top_layers: int, minibatch: int) -> dict:
    """The update from the rollout's trunk with the adapter on every token vs on the reply only."""
    lcfg, frozen, bank = _top_bank(model, n_agents, top_layers)
    opt = make_optimizer(1e-3, 1.0)
    settings = UpdateSettings(clip_eps=0.2, kl_coef=0.01, epochs=1, minibatch_size=minibatch, kl_kind="exact")
    state = init_opt_state(opt, bank)
    batch = _branch_batch(jax.random.PRNGKey(1), n_agents, b, t, model.config.vocab_size, 6, labels=5, width=8)
    keys = jax.random.split(jax.random.PRNGKey(2), n_agents)
    runs = {}
    for scope in ("all", "reply"):
        policy = LetterPolicy(model.family, model.config, lcfg.scale, temperature=1.0, remat=True,
                              frozen_layers=frozen, reply_only=scope == "reply")
        prepare = jax.jit(jax.vmap(lambda x: policy.prepare(model.params, x)))
        score = jax.jit(jax.vmap(lambda lo, x: policy.policy_fn(model.params, lo, x).logp))
        handed = batch.replace(inputs=prepare(batch.inputs), old_logp=score(bank, batch.inputs))
        update = make_bank_update(policy.policy_fn, opt, settings, policy.prepare)
        _, first = _timed(update, model.params, bank, state, handed, keys)
        _, run = _timed(update, model.params, bank, state, handed, keys)
        runs[scope] = (first - run, run)
    slow, fast = runs["all"][1], runs["reply"][1]
    row = {"backbone": "smollm2-135m", "agents": n_agents, "decisions_per_agent": b, "prompt_tokens": t,
           "branch_tokens": 5 * 8, "top_layers": top_layers, "all_s": slow, "reply_s": fast, "speedup": slow / fast,
           "all_compile_s": runs["all"][0], "reply_compile_s": runs["reply"][0]}
    print(f"  adapter scope: update with the adapter on every token {slow:8.2f} s | on the reply only {fast:8.2f} s "
          f"| {slow / fast:5.2f}x ({n_agents} agents x {b} decisions of {t} + 40 tokens, top {top_layers} layers)",
          flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench update", description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=7)
    p.add_argument("--seeds", type=int, default=5,
                   help="also time the bank of seeds x agents adapters (a multi-seed run's update); 1: skip")
    p.add_argument("--tiny-decisions", type=int, default=16)
    p.add_argument("--tiny-tokens", type=int, default=128)
    p.add_argument("--smollm2-decisions", type=int, default=4)
    p.add_argument("--smollm2-tokens", type=int, default=64)
    p.add_argument("--skip-smollm2", action="store_true")
    p.add_argument("--trunk", action="store_true", help="also time the update from the rollout's trunk (SmolLM2)")
    p.add_argument("--trunk-decisions", type=int, default=8)
    p.add_argument("--trunk-tokens", type=int, default=832)
    p.add_argument("--scope", action="store_true",
                   help="also time the update with the adapter on every token vs on the reply only (SmolLM2)")
    p.add_argument("--scope-decisions", type=int, default=16)
    p.add_argument("--scope-tokens", type=int, default=448)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = _tiny_llama(tmp)
        rows.append(bench_backbone("tiny-llama", tiny, args.agents, args.tiny_decisions,
                                   args.tiny_tokens, minibatch=8, rank=8))
        if args.seeds > 1:
            rows.append(bench_backbone(f"tiny-llama {args.seeds}x{args.agents}", tiny, args.seeds * args.agents,
                                       args.tiny_decisions, args.tiny_tokens, minibatch=8, rank=8))
    if not args.skip_smollm2:
        rows.append(bench_backbone("smollm2-135m", load("smollm2-135m", with_tokenizer=False), args.agents,
                                   args.smollm2_decisions, args.smollm2_tokens,
                                   minibatch=args.smollm2_decisions, rank=16))
    trunk = None
    if args.trunk:
        trunk = bench_trunk(load("smollm2-135m", with_tokenizer=False), 2, args.trunk_decisions, args.trunk_tokens,
                            top_layers=8, minibatch=4)
    scope = None
    if args.scope:
        scope = bench_scope(load("smollm2-135m", with_tokenizer=False), 2, args.scope_decisions, args.scope_tokens,
                            top_layers=8, minibatch=8)
    print(json.dumps({"bench": "update", "device": jax.default_backend(), "results": rows, "trunk": trunk,
                      "scope": scope}))
    return 0
