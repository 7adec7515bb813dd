"""One PA-MAGRPO update for N agents: `jax.vmap` over the adapter bank vs a Python loop over agents.

    python -m omjax.bench update [--agents 7] [--skip-smollm2] [--smollm2-decisions 4] ...

Both variants run the same shipped one-agent update (`omjax.train.update.make_agent_update`) on
the same random letter-mode decision batches: the vmapped one is `make_bank_update` (one jitted
call for the whole bank), the loop jits the one-agent update once and calls it per agent. Each
is timed after a warm-up call (compile excluded, reported separately), and the final adapters
are checked equal. Backbones: a tiny random Llama (built with transformers, no download) and
SmolLM2-135M (the shipped GGUF). Ends with one JSON line `{"bench": "update", ...}`.
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

    vmapped = make_bank_update(policy.policy_fn, opt, settings)
    (v_bank, _, _), v_first = _timed(vmapped, model.params, bank, state, batch, keys)
    (v_bank, _, _), v_run = _timed(vmapped, model.params, bank, state, batch, keys)

    one = jax.jit(make_agent_update(policy.policy_fn, opt, settings))
    pick = lambda tree, i: jax.tree.map(lambda x: x[i], tree)

    def loop(params, bank, state, batch, keys):
        return [one(params, pick(bank, i), pick(state, i), pick(batch, i), keys[i])[0] for i in range(n_agents)]

    l_banks, l_first = _timed(loop, model.params, bank, state, batch, keys)
    l_banks, l_run = _timed(loop, model.params, bank, state, batch, keys)
    err = 0.0
    for i, l in enumerate(l_banks):
        for a, c in zip(jax.tree.leaves(pick(v_bank, i)), jax.tree.leaves(l)):
            err = max(err, float(jnp.max(jnp.abs(a - c))))
    tokens = n_agents * b * t
    row = {
        "backbone": name, "agents": n_agents, "decisions_per_agent": b, "tokens_per_decision": t,
        "vmap_s": v_run, "loop_s": l_run, "loop_over_vmap": l_run / v_run,
        "vmap_compile_s": v_first - v_run, "loop_compile_s": l_first - l_run,
        "vmap_tokens_per_s": tokens * settings.epochs / v_run, "max_abs_diff": err,
    }
    print(f"{name:>14}: vmapped {v_run:8.3f} s | python loop {l_run:8.3f} s | loop/vmap {l_run / v_run:5.2f}x "
          f"| compile vmap {v_first - v_run:6.1f} s loop {l_first - l_run:6.1f} s | max |diff| {err:.2e}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench update", description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=7)
    p.add_argument("--tiny-decisions", type=int, default=16)
    p.add_argument("--tiny-tokens", type=int, default=128)
    p.add_argument("--smollm2-decisions", type=int, default=4)
    p.add_argument("--smollm2-tokens", type=int, default=64)
    p.add_argument("--skip-smollm2", action="store_true")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(bench_backbone("tiny-llama", _tiny_llama(tmp), args.agents, args.tiny_decisions,
                                   args.tiny_tokens, minibatch=8, rank=8))
    if not args.skip_smollm2:
        rows.append(bench_backbone("smollm2-135m", load("smollm2-135m", with_tokenizer=False), args.agents,
                                   args.smollm2_decisions, args.smollm2_tokens,
                                   minibatch=args.smollm2_decisions, rank=16))
    print(json.dumps({"bench": "update", "device": jax.default_backend(), "results": rows}))
    return 0
