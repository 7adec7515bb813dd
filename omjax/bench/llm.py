"""`python -m omjax.bench llm`: SmolLM2-135M policy decisions on the training path, omjax vs
transformers PyTorch eager.

Prompts are real: the games of the quick-start configs (Overcooked Asymmetric Advantages and
Cleanup) are reset and walked under uniformly random option choices, and every pending decision
is rendered exactly as a training rollout renders it (system + user message through the chat
template, the reply's state branches of `policy.state_line=model`, the lettered menu). Same
weights (the dequantised GGUF, loaded into both), same prompts, same run:

- policy decisions/s: `Decider.decide`, the one path training rollouts and evaluation run (the
  shared prefix prefilled once per adapter, per-row adapters of the game's training bank, the
  joint (state label, letter) draw), against a plain transformers policy taking the same
  decision: each whole prompt with a KV cache, then every state branch on a copy of it, the
  same joint draw. The un-cached omjax path (whole prompts) runs too: it must draw the same
  (label, letter) pairs under the same keys;
- prefill tokens/s: forwards over the whole prompts (choice-position logits only; PyTorch
  `logits_to_keep=1`), batched as the decision path batches prompts (`inference.length_groups`;
  PyTorch gets the same groups), and the achieved FLOP/s as a fraction of a jitted 2048 x 2048
  f32 `jnp.dot` measured in the same run, counting the useful FLOPs of the real tokens only
  (`forward_flops`: no padding, causal attention).

PyTorch runs under `torch.inference_mode()` on batches padded to their longest prompt (omjax
pads to its shape grid, which eager PyTorch does not need).

`--set KEY=VALUE ...` applies config overrides to every game's quick-start config (e.g. a
learning setting's `lora.scope=reply lora.top_layers=8 env.menu_format=letter_last`), and
`--realign L` also times the same decisions drawn under `policy.realign=L` (omjax only: the
realigned draw's second pass, against the plain one on the same bank and keys).
Ends with one JSON line `{"bench": "llm", ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

# JAX, torch, transformers and the omjax modules (which start JAX) are imported inside the
# functions that use them, so that `--help` and argument errors answer without starting either
# framework (several seconds here).

CONFIGS = {"overcooked": "configs/quickstart_overcooked_smollm2.yaml",
           "cleanup": "configs/quickstart_cleanup_smollm2.yaml"}


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


def forward_flops(cfg, lengths) -> float:
    """Useful matmul FLOPs of one forward over prompts of `lengths` real tokens with
    choice-position logits only: every projection of every real token, the score and value
    products of each real token against the real tokens up to it, one unembedding row per
    prompt. Padding and masked-out score entries count nothing, so the fraction of peak is
    what the model needed, not what the padded program happened to compute."""
    d, f, dh = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    proj = d * dh * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * d * f
    tokens = sum(int(n) for n in lengths)
    attended = sum(int(n) * (int(n) + 1) // 2 for n in lengths)  # causal (query, key) pairs
    per_layer = 2 * proj * tokens + 2 * 2 * cfg.num_heads * dh * attended
    return per_layer * cfg.num_layers + len(lengths) * 2 * d * cfg.vocab_size


def torch_model_from(model):
    """A transformers LlamaForCausalLM holding exactly the omjax model's weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from omjax.models.loader import gguf_snapshot, read_snapshot

    src = Path(model.source)
    hf, get = read_snapshot(gguf_snapshot(src) if src.suffix == ".gguf" else src)
    tm = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in hf.items() if k != "model_type"}))
    state = {k: torch.from_numpy(np.array(get(k))) for k in tm.state_dict() if k != "lm_head.weight"}
    tm.load_state_dict(state, strict=False)
    tm.tie_weights()
    return tm.eval()


def game_requests(name: str, decider, n: int, seed: int, walk: int,
                  overrides: tuple[str, ...] = ()) -> tuple[str, list]:
    """`n` decision requests of game `name` from real states: its quick-start config's game,
    walked `walk` env steps under uniformly random options, then every pending decision is
    rendered as `collect` renders it, stepping on until `n` are pending in total. One episode
    per 8 requests (at least 2) is stepped, so a short quick-start horizon holds any `n`."""
    from omjax.config import load_config
    from omjax.prompts import Memory
    from omjax.games import make_game
    from omjax.options.libraries import resolve_library
    from omjax.train.rollout import Request, episode_seed

    cfg = resolve_library(load_config(CONFIGS[name], list(overrides)))  # seed 0's library, as a training run would
    game = make_game(cfg.env, cfg.policy.action_interface)
    try:
        episodes = max(2, -(-n // 8))
        game.reset([episode_seed(seed, 0, k) for k in range(episodes)])
        rng = np.random.default_rng(seed)
        system, out, t = game.system_message(), [], 0
        memories = [[Memory(cfg.policy.memory_macros, cfg.policy.reward_window) for _ in range(game.n_agents)]
                    for _ in range(episodes)]
        while len(out) < n:
            if t >= game.horizon:
                raise RuntimeError(f"{name}: {game.horizon} steps gave only {len(out)} of {n} decisions")
            choices = np.zeros((episodes, game.n_agents), np.int32)
            for k, i in np.argwhere(game.needs_decision()):
                k, i = int(k), int(i)
                menu = decider.labelled(game.menu(k, i, rng))
                pick = menu[int(rng.integers(len(menu)))]
                choices[k, i] = pick.index
                if t >= walk and len(out) < n:
                    prompt = decider.prompt(system, game.user_message(k, i, menu, memories[k][i]))
                    out.append(Request(k, i, menu, prompt, game.fallback(k, i, menu), None,
                                       adapter=i, branches=decider.state_branches(game, k, i)))
                memories[k][i].decided(pick.opt)
            game.step(choices)
            t += 1
        return system, out
    finally:
        game.close()


def torch_decider(tm, decider, requests, temperature: float, gen):
    """The same joint (state label, letter) draw by a plain transformers policy: each whole
    prompt once with a KV cache, then every state branch on a copy of that cache."""
    import torch

    from omjax.models import inference

    prompts = [decider.encode(r.prompt) for r in requests]
    # Padded to the longest prompt, as a tokenizer pads a batch: eager PyTorch has no compiled
    # shapes to reuse, so the grid omjax pads to would only give it work to waste.
    tokens, mask = inference.left_pad(prompts, max(map(len, prompts)))
    branches = requests[0].branches
    n_labels, width = len(branches.tokens), branches.width
    btok = np.zeros((n_labels, width), np.int64)
    bmask = np.zeros((n_labels, width), np.int64)
    for l, ids in enumerate(branches.tokens):
        btok[l, :len(ids)], bmask[l, :len(ids)] = ids, 1
    letters = [torch.tensor(decider.letter_ids([it.letter for it in r.menu])) for r in requests]
    tt, tm_mask = torch.tensor(tokens, dtype=torch.long), torch.tensor(mask, dtype=torch.long)
    pos = (tm_mask.cumsum(1) - 1).clamp(min=0)
    n = len(requests)

    def run():
        with torch.inference_mode():
            out = tm(input_ids=tt, attention_mask=tm_mask, position_ids=pos, use_cache=True, logits_to_keep=1)
            cache = out.cache
            cache.batch_repeat_interleave(n_labels)
            first = torch.log_softmax(out.logits[:, -1] / temperature, -1)  # [N, V]
            ids = torch.tensor(btok).repeat(n, 1)  # [N*L, W]
            am = torch.cat([tm_mask.repeat_interleave(n_labels, 0), torch.tensor(bmask).repeat(n, 1)], 1)
            bpos = tm_mask.sum(1).repeat_interleave(n_labels)[:, None] + torch.arange(width)[None]
            logits = tm(input_ids=ids, attention_mask=am, position_ids=bpos, cache=cache).logits
            logp = torch.log_softmax(logits / temperature, -1).view(n, n_labels, width, -1)
            picks = []
            for j in range(n):
                score = []
                for l, (toks, k) in enumerate(zip(branches.tokens, branches.label_len)):
                    s = first[j, toks[0]] + sum(logp[j, l, q - 1, toks[q]] for q in range(1, k))
                    score.append(s)
                label = torch.log_softmax(torch.stack(score), 0)
                ends = [len(toks) - 1 for toks in branches.tokens]
                at = logits.view(n, n_labels, width, -1)[j, torch.arange(n_labels), torch.tensor(ends)]
                letter = torch.log_softmax(at[:, letters[j]] / temperature, -1)
                joint = (label[:, None] + letter).flatten()
                picks.append(int(torch.multinomial(joint.exp(), 1, generator=gen)))
            return picks

    return run


def bench_game(name, model, tm, decider, bank, args, peak, realigned=None) -> dict:
    """One game's row; `realigned` (a `Decider` under `policy.realign`) is timed beside the
    plain cached decisions when given."""
    import jax
    import jax.numpy as jnp

    from omjax.models import inference

    _log(f"{name}: building {args.decisions} decisions from real states")
    system, requests = game_requests(name, decider, args.decisions, args.seed, args.walk, tuple(args.set))
    base, fam, cfg = model.params, model.family, model.config
    prompts = [decider.encode(r.prompt) for r in requests]
    t0 = time.perf_counter()
    prefix = decider.prefill(base, bank, system)
    jax.block_until_ready(prefix.caches)
    prefix_first = time.perf_counter() - t0
    prefix_s = _timeit(lambda: jax.block_until_ready(decider.prefill(base, bank, system).caches), args.repeats)
    keys = [jax.random.split(jax.random.PRNGKey(100 + r), len(requests)) for r in range(args.repeats + 1)]

    def timed(decide):
        """Outcomes under every key, and the best wall time after the first (compiling) call."""
        outs, times = [], []
        for k in keys:
            t0 = time.perf_counter()
            outs.append(decide(k))
            times.append(time.perf_counter() - t0)
        return outs, min(times[1:])

    _log(f"{name}: decisions (omjax, cached prefix, then whole prompts)")
    cached, t_cached = timed(lambda k: decider.decide(base, bank, requests, k, prefix))
    whole, t_whole = timed(lambda k: decider.decide(base, bank, requests, k))
    same = all([(o.state, o.action) for o in a] == [(o.state, o.action) for o in b] for a, b in zip(cached, whole))
    logp_diff = max(abs(x.logp - y.logp) for a, b in zip(cached, whole) for x, y in zip(a, b))
    extra = {}
    if realigned is not None:
        _log(f"{name}: decisions (omjax, cached prefix, realign {realigned.policy.realign})")
        moved, t_realigned = timed(lambda k: realigned.decide(base, bank, requests, k, prefix))
        extra = {"realign": realigned.policy.realign, "decisions_s_omjax_realigned": len(requests) / t_realigned,
                 "realign_time_ratio": t_realigned / t_cached,
                 "realigned_draws_changed": sum((x.state, x.action) != (y.state, y.action)
                                                for a, b in zip(cached, moved) for x, y in zip(a, b))}

    _log(f"{name}: decisions (torch eager)")
    import torch

    run_torch = torch_decider(tm, decider, requests, decider.policy.temperature, torch.Generator().manual_seed(0))
    t_torch = _timeit(run_torch, args.repeats)

    _log(f"{name}: prefill (omjax, torch)")
    # Batched as the decision path batches whole prompts (`inference.length_groups`: up to four
    # calls of similar lengths, rows to a power of two, lengths on the shape grid); PyTorch gets
    # the same groups, each padded to its longest prompt.
    groups = inference.length_groups([len(p) for p in prompts])
    ours = [inference.left_pad([prompts[j] for j in g], rows=inference.pow2_at_least(len(g))) for g in groups]
    ours = [(jnp.asarray(t), jnp.asarray(m)) for t, m in ours]
    prefill_fn = jax.jit(lambda p, t, m: fam.forward(p, cfg, t, attention_mask=m, last_only=True)[0])
    run_ours = lambda: [prefill_fn(base, t, m)[: len(g), -1] for (t, m), g in zip(ours, groups)]
    t_ours = _timeit(lambda: jax.block_until_ready(run_ours()), args.repeats)
    theirs = []
    for g in groups:
        ttok, tmask = inference.left_pad([prompts[j] for j in g], max(len(prompts[j]) for j in g))
        tt, tmask = torch.tensor(ttok, dtype=torch.long), torch.tensor(tmask, dtype=torch.long)
        theirs.append((tt, tmask, (tmask.cumsum(1) - 1).clamp(min=0)))

    def torch_prefill():
        with torch.inference_mode():
            return [tm(input_ids=tt, attention_mask=mk, position_ids=pos, logits_to_keep=1).logits[:, -1]
                    for tt, mk, pos in theirs]

    t_torch_prefill = _timeit(torch_prefill, args.repeats)
    maxdiff = max(float(np.abs(np.asarray(a) - b.numpy()).max()) for a, b in zip(run_ours(), torch_prefill()))
    real = sum(map(len, prompts))
    slots = sum(int(t.size) for t, _ in ours)
    flops = forward_flops(cfg, [len(p) for p in prompts])
    n = len(requests)
    return {
        "decisions": n, "mean_prompt_tokens": float(np.mean([len(p) for p in prompts])),
        "shared_prefix_tokens": len(prefix.ids), "state_labels": len(requests[0].branches.tokens),
        "prefix_prefill_s": prefix_s, "prefix_prefill_first_s": prefix_first,
        "decisions_s_omjax": n / t_cached, "decisions_s_omjax_uncached": n / t_whole,
        "decisions_s_torch": n / t_torch, "decisions_speedup": t_torch / t_cached,
        "same_decisions_as_uncached": bool(same), "logp_maxdiff_vs_uncached": float(logp_diff),
        "prefill_calls": [list(map(int, t.shape)) for t, _ in ours], "prefill_real_tokens": real,
        "prefill_padding_fraction": 1 - real / slots,
        "prefill_tok_s_omjax": real / t_ours, "prefill_tok_s_torch": real / t_torch_prefill,
        "prefill_speedup": t_torch_prefill / t_ours, "prefill_gflops_omjax": flops / t_ours / 1e9,
        "prefill_peak_fraction": flops / t_ours / peak, "prefill_logit_maxdiff": maxdiff, **extra,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m omjax.bench llm", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--games", default="overcooked,cleanup", help="comma-separated: overcooked, cleanup")
    ap.add_argument("--decisions", type=int, default=8, help="decisions per batched call (per game)")
    ap.add_argument("--walk", type=int, default=3, help="random env steps before the prompts are taken")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMJAX_BENCH_THREADS", "0")),
                    help="torch intra-op threads (0 = torch default)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="config overrides applied to every game's quick-start config")
    ap.add_argument("--realign", type=float, default=1.0,
                    help="also time the decisions under policy.realign=L (1: skip)")
    args = ap.parse_args(argv)
    games = [g.strip() for g in args.games.split(",") if g.strip()]
    unknown = sorted(set(games) - set(CONFIGS))
    if unknown:
        ap.error(f"--games: unknown {unknown}; known: {sorted(CONFIGS)}")

    import jax
    import torch

    from omjax.config import load_config
    from omjax.models import load, lora
    from omjax.train.trainer import make_policy
    from omjax.train.rollout import Decider

    if args.threads:
        torch.set_num_threads(args.threads)
    model = load(args.model)
    cfg = load_config(CONFIGS[games[0]], args.set)
    lcfg = cfg.lora
    policy = make_policy(cfg, model, lcfg)
    decider = Decider(policy, model.tokenizer, cfg.policy)
    realigned = None
    if args.realign != 1.0:
        rcfg = load_config(CONFIGS[games[0]], [*args.set, f"policy.realign={args.realign}"])
        realigned = Decider(make_policy(rcfg, model, rcfg.lora), model.tokenizer, rcfg.policy)
    _log("measuring matmul peak")
    peak = matmul_peak()
    tm = torch_model_from(model)
    res = {"bench": "llm", "model": args.model, "backend": jax.default_backend(),
           "dtype": str(model.params["embed"].dtype), "torch_threads": torch.get_num_threads(),
           "matmul_peak_gflops": peak / 1e9, "state_line": cfg.policy.state_line, "overrides": list(args.set)}
    for name in games:
        game_cfg = load_config(CONFIGS[name], args.set)
        n_agents = game_cfg.n_adapters
        if game_cfg.lora.scale != lcfg.scale:
            raise ValueError(f"{name}: lora.alpha / lora.rank {game_cfg.lora.scale} differs from {games[0]}'s "
                             f"{lcfg.scale}; the benchmark runs one policy")
        # The game's training bank (its `lora.targets` on its `lora.top_layers`), with non-zero B
        # so the adapters do real work, as after the first update.
        bank = lora.init_lora(jax.random.PRNGKey(0), model.family.lora_shapes(model.config), game_cfg.lora, n_agents)
        bank = jax.tree.map(lambda x: x + 1e-3, bank)
        res[name] = bench_game(name, model, tm, decider, bank, args, peak, realigned)
    rows = [res[g] for g in games]
    res["decisions_speedup"] = float(np.mean([r["decisions_speedup"] for r in rows]))
    res["prefill_peak_fraction"] = float(np.mean([r["prefill_peak_fraction"] for r in rows]))
    res["same_decisions_as_uncached"] = all(r["same_decisions_as_uncached"] for r in rows)
    print(f"{'':24s}{'omjax':>10s}{'uncached':>10s}{'torch':>10s}{'ratio':>8s}")
    for g, r in zip(games, rows):
        print(f"{g + ' decisions/s':24s}{r['decisions_s_omjax']:10.2f}{r['decisions_s_omjax_uncached']:10.2f}"
              f"{r['decisions_s_torch']:10.2f}{r['decisions_speedup']:8.2f}")
        print(f"{g + ' prefill tok/s':24s}{r['prefill_tok_s_omjax']:10.1f}{'':10s}{r['prefill_tok_s_torch']:10.1f}"
              f"{r['prefill_speedup']:8.2f}   {100 * r['prefill_peak_fraction']:.1f}% of the jnp.dot peak "
              f"{peak / 1e9:.1f} GFLOP/s; same decisions as uncached: {r['same_decisions_as_uncached']}")
        if "realign" in r:
            print(f"{g + ' realigned dec/s':24s}{r['decisions_s_omjax_realigned']:10.2f}{'':20s}"
                  f"{r['realign_time_ratio']:8.2f}   time x plain at realign {r['realign']}; "
                  f"{r['realigned_draws_changed']} of {r['decisions'] * (args.repeats + 1)} draws changed")
    print(json.dumps(res))
    return 0
