"""`python -m omjax.bench llm`: SmolLM2-135M policy inference, omjax vs transformers PyTorch eager.

Same weights (the dequantised GGUF, loaded into both), same prompts, same run:
- prefill tokens/s: forward over a batch of rendered menu prompts, choice-position logits only
  (PyTorch: `logits_to_keep=1`, its cheapest equivalent);
- policy decisions/s: a batch of §5.1-style decision prompts (fixed system message, per-agent
  observation and shuffled lettered menu, ending at `choice:`) -> one sampled allowed letter
  each. omjax reuses the prefilled system message (its intended use); PyTorch runs each full
  prompt, as a plain `transformers` policy would;
- achieved FLOP/s of the omjax prefill as a fraction of a measured jitted `jnp.dot` peak.
Ends with one JSON line `{"bench": "llm", ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from omjax.config import LORA_TARGETS, LoRAConfig

SYSTEM = (
    "You are an agent in a 2-player cooperative Overcooked-AI kitchen.\n\n"
    "Goal: place 3 onions in a pot, start the cook, plate the soup with a dish, deliver to the "
    "serving station. Each delivery scores +20 (shared with partner).\n\n"
    "The action menu only lists currently-feasible actions. Pick one letter.\n\n"
    "Output format (exactly two lines, nothing else):\n"
    "state:  <empty | filling | cooking | ready_to_plate | delivering>\n"
    "choice: <single capital letter>")

_OPTIONS = ["place held item in pot @ ({x}, {y})", "drop held item on counter @ ({x}, {y})",
            "pick up onion @ ({x}, {y})", "pick up dish @ ({x}, {y})",
            "deliver soup @ ({x}, {y})", "plate soup from pot @ ({x}, {y})"]
_HELD = ["onion", "dish", "nothing", "soup"]
_FACING = ["North", "South", "East", "West"]


def decision_messages(rng: np.random.Generator, letters: str) -> tuple[list[dict], int]:
    """One §5.1-style decision (system + user message) and its menu size."""
    n = int(rng.integers(3, len(letters) + 1))
    menu = "\n".join(f"{letters[i]}) " + _OPTIONS[int(rng.integers(len(_OPTIONS)))].format(
        x=int(rng.integers(0, 8)), y=int(rng.integers(0, 5))) for i in range(n))
    me = int(rng.integers(0, 2))
    partner = 1 - me
    pos = lambda: f"({int(rng.integers(0, 8))}, {int(rng.integers(0, 5))})"
    user = (
        f"You are player {me}. World position: {pos()}.\nFacing: {rng.choice(_FACING)}. "
        f"Holding: {rng.choice(_HELD)}.\nPartner (player {partner}): pos={pos()} "
        f"facing={rng.choice(_FACING)}\nholding={rng.choice(_HELD)}.\n\nPots:\n"
        f"  - pot@(4, 2): {int(rng.integers(0, 4))}/3 onions\n"
        f"      you: {int(rng.integers(1, 9))} | partner: {int(rng.integers(1, 9))}\n"
        f"  - pot@(4, 3): {int(rng.integers(0, 4))}/3 onions\n"
        f"      you: {int(rng.integers(1, 9))} | partner: {int(rng.integers(1, 9))}\n"
        f"Counters: (empty)\nLayout: asymmetric_advantages.   Step {int(rng.integers(1, 150))}/150.\n\n"
        f"Memory:\n- Last 5 macros decided: pick_onion\n- Total reward last 100 steps: 0\n\n"
        f"Action menu:\n{menu}\n\nChoose one. Reply with exactly two lines.")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}], n


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _timeit(fn, repeats: int) -> float:
    """Best wall time of `repeats` calls (after one warm-up call, which compiles)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_peak(n: int = 2048, dtype="float32", repeats: int = 5) -> float:
    """Measured FLOP/s of a jitted n x n `jnp.dot` (the practical matmul ceiling)."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), dtype) / n
    f = jax.jit(lambda x: jnp.dot(x, x))
    t = _timeit(lambda: f(a).block_until_ready(), repeats)
    return 2 * n ** 3 / t


def forward_flops(cfg, batch: int, seq: int, kv_len: int | None = None) -> float:
    """Matmul FLOPs of one forward over `[batch, seq]` with choice-position logits only.

    kv_len: attended length (seq without a cache). Counts what the program computes: every
    projection for every token, full (unmasked) score and value matmuls, one unembedding row.
    """
    kv_len = seq if kv_len is None else kv_len
    d, f, dh = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    proj = d * dh * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * d * f
    attn = 2 * cfg.num_heads * dh * kv_len
    per_token = 2 * (proj + attn) * cfg.num_layers
    return batch * seq * per_token + batch * 2 * d * cfg.vocab_size


def torch_model_from(model):
    """A transformers LlamaForCausalLM holding exactly the omjax model's weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from omjax.models.loader import read_snapshot

    hf, get = read_snapshot(_snapshot_dir(model))
    tm = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in hf.items() if k != "model_type"}))
    state = {k: torch.from_numpy(np.array(get(k))) for k in tm.state_dict() if k != "lm_head.weight"}
    tm.load_state_dict(state, strict=False)
    tm.tie_weights()
    return tm.eval()


def _snapshot_dir(model):
    from pathlib import Path

    from omjax.models.loader import gguf_snapshot

    src = Path(model.source)
    return gguf_snapshot(src) if src.suffix == ".gguf" else src


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m omjax.bench llm", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--agents", type=int, default=2, help="agents (one private LoRA each)")
    ap.add_argument("--decisions", type=int, default=4, help="decisions per agent per call")
    ap.add_argument("--prefill-batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMJAX_BENCH_THREADS", "0")),
                    help="torch intra-op threads (0 = torch default)")
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import torch

    from omjax.models import inference, load, lora

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load(args.model)
    tok, cfg, fam = model.tokenizer, model.config, model.family
    letters = "ABCDEFGH"
    policy = inference.MenuPolicy(model, letters=letters)
    rng = np.random.default_rng(0)

    # ---- prompts: A agents x D decisions, all sharing the system message
    n_agents, n_dec = args.agents, args.decisions
    prompts, allowed = [], np.zeros((n_agents, n_dec, len(letters)), bool)
    for a in range(n_agents):
        row = []
        for d in range(n_dec):
            msgs, n = decision_messages(rng, letters)
            row.append(inference.encode(tok, inference.render_decision_prompt(tok, msgs)))
            allowed[a, d, :n] = True
        prompts.append(row)
    flat = [p for row in prompts for p in row]
    shared = 0
    while all(len(p) > shared and p[shared] == flat[0][shared] for p in flat):
        shared += 1
    prefix = flat[0][:shared]
    mean_len = float(np.mean([len(p) for p in flat]))

    # ---- per-agent adapters (nonzero B, so the LoRA path does real work)
    lcfg = LoRAConfig(rank=16, alpha=32.0, targets=LORA_TARGETS)
    bank = lora.init_lora(jax.random.PRNGKey(0), fam.lora_shapes(cfg), lcfg, n_agents)
    bank = jax.tree.map(lambda x: x + 1e-3, bank)

    _log("measuring matmul peak")
    # ---- matmul peak
    peak = matmul_peak()

    _log("prefill (omjax, then torch)")
    # ---- prefill: omjax vs torch on the same left-padded batch
    pb = flat[:args.prefill_batch]
    tokens, mask = inference.left_pad(pb)
    real_tokens = int(mask.sum())
    jt, jm = jnp.asarray(tokens), jnp.asarray(mask)
    prefill_fn = jax.jit(lambda p, t, m: fam.forward(p, cfg, t, attention_mask=m, last_only=True)[0])
    t_ours = _timeit(lambda: prefill_fn(model.params, jt, jm).block_until_ready(), args.repeats)
    tm = torch_model_from(model)
    tt, tmask = torch.tensor(tokens, dtype=torch.long), torch.tensor(mask, dtype=torch.long)

    def torch_prefill():
        with torch.no_grad():
            return tm(input_ids=tt, attention_mask=tmask, logits_to_keep=1).logits

    t_torch = _timeit(torch_prefill, args.repeats)
    ours_last = np.asarray(prefill_fn(model.params, jt, jm))[:, -1]
    torch_last = torch_prefill()[:, -1].float().numpy()
    prefill_maxdiff = float(np.abs(ours_last - torch_last).max())
    flops = forward_flops(cfg, tokens.shape[0], tokens.shape[1])
    prefill_flops_frac = flops / t_ours / peak

    _log("decisions (omjax)")
    # ---- decisions: omjax (prefix prefilled once per adapter version, per-agent LoRA, vmapped)
    suffixes = [[p[shared:] for p in row] for row in prompts]
    pc = policy.prefill(prefix, n_agents, bank, lcfg.scale)
    key = jax.random.PRNGKey(1)
    decide = lambda: policy.decide(key, suffixes, allowed, prefix_cache=pc, bank=bank,
                                   lora_scale=lcfg.scale, temperature=0.9)
    t_dec_ours = _timeit(decide, args.repeats)

    _log("decisions (torch)")
    # ---- decisions: PyTorch eager on each agent's full prompts. It runs the bare base (no
    # adapter work at all), which can only favour PyTorch in the ratio.
    letter_ids = torch.tensor(np.asarray(policy.letter_ids), dtype=torch.long)
    gen = torch.Generator().manual_seed(0)

    def torch_decide():
        out = []
        with torch.no_grad():
            for a in range(n_agents):
                t_, m_ = inference.left_pad(prompts[a], length=None)
                logits = tm(input_ids=torch.tensor(t_, dtype=torch.long),
                            attention_mask=torch.tensor(m_, dtype=torch.long),
                            logits_to_keep=1).logits[:, -1]
                lg = logits[:, letter_ids].masked_fill(~torch.tensor(allowed[a]), float("-inf"))
                out.append(torch.multinomial(torch.softmax(lg / 0.9, -1), 1, generator=gen)[:, 0])
        return out

    t_dec_torch = _timeit(torch_decide, args.repeats)
    n_decisions = n_agents * n_dec

    res = {
        "bench": "llm", "model": args.model, "backend": jax.default_backend(),
        "dtype": str(model.params["embed"].dtype), "torch_threads": torch.get_num_threads(),
        "matmul_peak_gflops": peak / 1e9,
        "prefill_batch": tokens.shape[0], "prefill_len": tokens.shape[1], "prefill_real_tokens": real_tokens,
        "prefill_tok_s_omjax": real_tokens / t_ours, "prefill_tok_s_torch": real_tokens / t_torch,
        "prefill_speedup": t_torch / t_ours, "prefill_gflops_omjax": flops / t_ours / 1e9,
        "prefill_peak_fraction": prefill_flops_frac, "prefill_logit_maxdiff": prefill_maxdiff,
        "agents": n_agents, "decisions_per_call": n_decisions, "shared_prefix_tokens": shared,
        "mean_prompt_tokens": mean_len,
        "decisions_s_omjax": n_decisions / t_dec_ours, "decisions_s_torch": n_decisions / t_dec_torch,
        "decisions_speedup": t_dec_torch / t_dec_ours,
    }
    print(f"{'':28s}{'omjax':>12s}{'torch eager':>14s}{'ratio':>8s}")
    print(f"{'prefill tokens/s':28s}{res['prefill_tok_s_omjax']:12.1f}{res['prefill_tok_s_torch']:14.1f}"
          f"{res['prefill_speedup']:8.2f}")
    print(f"{'policy decisions/s':28s}{res['decisions_s_omjax']:12.2f}{res['decisions_s_torch']:14.2f}"
          f"{res['decisions_speedup']:8.2f}")
    print(f"prefill {res['prefill_gflops_omjax']:.1f} GFLOP/s = {100 * prefill_flops_frac:.1f}% of the "
          f"measured jnp.dot peak {peak / 1e9:.1f} GFLOP/s; logits max |diff| {prefill_maxdiff:.2e}")
    print(json.dumps(res))
    return 0
