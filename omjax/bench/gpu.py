"""`python -m omjax.bench gpu`: the paper's four backbones at their real shapes on one accelerator.

    python -m omjax.bench gpu                      # all four, bf16, paper settings (an H100-class GPU)
    python -m omjax.bench gpu --tiny               # the same code, test-sized configs, on the CPU
    python -m omjax.bench gpu --models qwen3.5-2b  # one backbone

Per backbone (`omjax.models.configs`: the published config.json shapes, random bf16 weights):
- `decide_A{2,7}`: policy decisions/s of one batched letter-mode call over every pending decision
  of `--seeds` seeds x A agents x K rollouts (K = 6 for Overcooked's 2 agents, 4 for Melting Pot's
  7), rows indexing an adapter bank of seeds x A adapters (row of seed s, agent a: s*A + a), as
  the multi-seed trainer sends them; prompts of `--prompt-tokens`.
- `update`: wall time of one PA-MAGRPO update (`make_bank_update`) at the paper's Overcooked
  settings (§6.1: LoRA rank 16 on q/k/v/o, clip 0.2, KL 0.05, 2 epochs, minibatch 8, Adam, clip
  1.0, per-layer remat) over seeds x 2 adapters with `--update-decisions` decisions each.
- `peak_bytes`: the device's peak memory after the update, next to `memory_estimate` of the same
  shapes (`parallel_agents=True`: the vmapped update holds every adapter's activations at once).
The arrays are placed as the trainer places them (`omjax.train.sharding`): on several devices
the bank and rows split over the mesh's "data" axis and, under `--base-sharding` (default `auto`:
when the estimate exceeds one device's memory), the base shards over its "model" axis, drawn
directly in its shards. Then JAX Overcooked steps/s (`omjax.bench.env.JaxBench`, random joint
actions). Each timing is
the best of `--repeats` calls after a compiling one (compile time reported apart). On an
accelerator each backbone runs in its own process, so every peak is that backbone's own. Ends
with one JSON line `{"bench": "gpu", ...}`.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from omjax.config import LoRAConfig
from omjax.models import configs, memory_estimate
from omjax.models import lora as lora_lib
from omjax.models.inference import pow2_at_least
from omjax.train.policy import LetterPolicy
from omjax.train.sharding import BASE_SHARDING, Placement, device_bytes_limit, model_axis
from omjax.train.update import DecisionBatch, UpdateSettings, init_opt_state, make_bank_update, make_optimizer

MENU = 16
"""Menu slots per decision (Overcooked AA menus hold 9-14 entries; padded to 16)."""

GAMES = {2: dict(rollouts=6, rank=16, temperature=0.9), 7: dict(rollouts=4, rank=32, temperature=0.7)}
"""Paper §6.1 per agent count: Overcooked (2 agents) and Melting Pot (7 agents)."""


def _best(fn, repeats: int) -> tuple[float, float, object]:
    """(compile + first call seconds, best timed call seconds, last output)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return first, best, out


def _peak_bytes() -> int | None:
    """The largest peak over this process's devices."""
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    return max((p for p in peaks if p is not None), default=None)


def _bank(model, n: int, rank: int, seed: int):
    cfg = LoRAConfig(rank=rank, alpha=2.0 * rank, targets=("q", "k", "v", "o"))
    bank = lora_lib.init_lora(jax.random.PRNGKey(seed), model.family.lora_shapes(model.config), cfg, n)
    # Non-zero B, as after a first update, so that adapters differ and the KL has a gradient.
    return cfg, jax.tree.map(lambda x: x + 0.01, bank)


def decide_case(model, agents: int, seeds: int, tokens: int):
    """The letter-mode call `bench_decide` times: (policy, bank, bank_rows [R], inputs, keys [R],
    decisions n <= R)."""
    game = GAMES[agents]
    lcfg, bank = _bank(model, seeds * agents, game["rank"], 0)
    policy = LetterPolicy(model.family, model.config, lcfg.scale, game["temperature"], remat=False)
    n = seeds * agents * game["rollouts"]
    rows = pow2_at_least(n)  # the Decider pads a call's rows to a power of two
    rng = np.random.default_rng(0)
    slot = np.arange(rows) % n
    # Row r: seed s, rollout k, agent a -> bank index s*A + a (seed-major, as the trainer lays it).
    bank_rows = (slot // (agents * game["rollouts"])) * agents + slot % agents
    # The last token is the one state branch (`choice:` of a reply without a state line).
    inputs = {"tokens": jnp.asarray(rng.integers(0, model.config.vocab_size, (rows, 1, tokens)), jnp.int32),
              "mask": jnp.ones((rows, 1, tokens), jnp.int32).at[:, :, -1].set(2),
              "label_mask": jnp.zeros((rows, 1, 1, 1), bool), "end": jnp.zeros((rows, 1, 1), jnp.int32),
              "letters": jnp.asarray(np.broadcast_to(np.arange(MENU) + 5, (rows, 1, MENU)), jnp.int32),
              "menu_mask": jnp.ones((rows, 1, MENU), bool)}
    keys = jax.random.split(jax.random.PRNGKey(1), rows)
    return policy, bank, bank_rows, inputs, keys, n


def bench_decide(model, placement: Placement, agents: int, seeds: int, tokens: int, repeats: int) -> dict:
    game = GAMES[agents]
    policy, bank, bank_rows, inputs, keys, n = decide_case(model, agents, seeds, tokens)
    rows = len(bank_rows)
    bank = placement.bank(bank)
    bank_rows, inputs, keys = placement.split((bank_rows, inputs, keys))
    first, best, _ = _best(lambda: policy.decide(model.params, bank, bank_rows, inputs, keys), repeats)
    return {"agents": agents, "seeds": seeds, "adapters": seeds * agents, "decisions": n, "rows": rows,
            "prompt_tokens": tokens, "rank": game["rank"], "call_s": best, "compile_s": first - best,
            "decisions_per_s": n / best}


def update_case(model, seeds: int, decisions: int, tokens: int):
    """The update `bench_update` times: (update, bank, opt_state, batch, keys, active
    minibatches, settings) over seeds x 2 adapters of `decisions` decisions each."""
    agents, rank, minibatch = 2, GAMES[2]["rank"], 8
    n = seeds * agents
    lcfg, bank = _bank(model, n, rank, 2)
    policy = LetterPolicy(model.family, model.config, lcfg.scale, GAMES[2]["temperature"], remat=True)
    opt = make_optimizer(2e-5, 1.0)
    settings = UpdateSettings(clip_eps=0.2, kl_coef=0.05, epochs=2, minibatch_size=minibatch, kl_kind="exact")
    update = make_bank_update(policy.policy_fn, opt, settings)
    b = minibatch * pow2_at_least(-(-decisions // minibatch))
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(3), 3)
    valid = jnp.broadcast_to(jnp.arange(b) < decisions, (n, b))
    batch = DecisionBatch(
        inputs={"tokens": jax.random.randint(k1, (n, b, tokens), 0, model.config.vocab_size),
                "mask": jnp.ones((n, b, tokens), jnp.int32).at[:, :, -1].set(2),
                "label_mask": jnp.zeros((n, b, 1, 1), bool), "end": jnp.zeros((n, b, 1), jnp.int32),
                "letters": jnp.broadcast_to(jnp.arange(MENU) + 5, (n, b, MENU)),
                "menu_mask": jnp.ones((n, b, MENU), bool),
                "state": jnp.zeros((n, b), jnp.int32),
                "action": jax.random.randint(k2, (n, b), 0, MENU)},
        advantage=jax.random.normal(k3, (n, b)), valid=valid)
    state = init_opt_state(opt, bank)
    keys = jax.random.split(jax.random.PRNGKey(4), n)
    active = -(-decisions // minibatch)
    return update, bank, state, batch, keys, active, settings


def bench_update(model, placement: Placement, seeds: int, decisions: int, tokens: int, repeats: int) -> dict:
    agents, rank, minibatch = 2, GAMES[2]["rank"], 8
    n = seeds * agents
    update, bank, state, batch, keys, active, settings = update_case(model, seeds, decisions, tokens)
    bank, state = placement.bank(bank), placement.bank(state)
    batch, keys = placement.split((batch, keys))
    first, best, out = _best(lambda: update(model.params, bank, state, batch, keys, active), repeats)
    finite = bool(all(np.isfinite(np.asarray(x, np.float32)).all() for x in jax.tree.leaves(out[0])))
    est = memory_estimate(model.config, n, rank, minibatch, tokens, parallel_agents=True)
    return {"agents": agents, "seeds": seeds, "adapters": n, "decisions_per_adapter": decisions,
            "prompt_tokens": tokens, "rank": rank, "epochs": 2, "minibatch": minibatch,
            "update_s": best, "compile_s": first - best, "finite": finite,
            "tokens_per_s": n * decisions * tokens * settings.epochs / best,
            "estimate_bytes": est["total"], "estimate_gib": est["total_gib"]}


def placement_for(cfg, args) -> Placement:
    """Every visible device, the base sharded as `--base-sharding` / `--model-devices` say (the
    trainer's rule, on the update's estimate)."""
    est = memory_estimate(cfg, args.seeds * 2, GAMES[2]["rank"], 8, args.prompt_tokens, parallel_agents=True)
    devices = jax.devices()
    m = model_axis(args.base_sharding, len(devices), args.model_devices,
                   lambda m: est["total"] - est["base"] + est["base"] / m, device_bytes_limit(devices))
    return Placement(devices, model_devices=m)


def bench_backbone(name: str, args) -> dict:
    t0 = time.perf_counter()
    placement = placement_for(configs.config(name, args.tiny), args)
    model = configs.random_model(name, jnp.bfloat16, tiny=args.tiny, shard=placement.base_shardings)
    jax.block_until_ready(model.params)
    row = {"backbone": name, "params": model.config.n_params, "build_s": time.perf_counter() - t0,
           "mesh": {"data": placement.data_devices, "model": placement.model_devices}}
    for agents in (2, 7):
        row[f"decide_A{agents}"] = bench_decide(model, placement, agents, args.seeds, args.prompt_tokens,
                                                args.repeats)
        print(f"{name}: {agents} agents x {args.seeds} seeds: "
              f"{row[f'decide_A{agents}']['decisions_per_s']:.1f} decisions/s", file=sys.stderr, flush=True)
    row["update"] = bench_update(model, placement, args.seeds, args.update_decisions, args.prompt_tokens,
                                 args.repeats)
    row["peak_bytes"] = _peak_bytes()
    est = row["update"]["estimate_bytes"]
    row["peak_over_estimate"] = None if row["peak_bytes"] is None else row["peak_bytes"] / est
    print(f"{name}: update {row['update']['update_s']:.2f} s (compile {row['update']['compile_s']:.1f} s), "
          f"peak {row['peak_bytes']} B vs estimate {est} B", file=sys.stderr, flush=True)
    del model
    gc.collect()
    return row


def bench_env(batch: int, steps: int, repeats: int) -> dict:
    from omjax.bench.env import JaxBench

    bench = JaxBench("asymmetric_advantages", batch, steps, horizon=400, consume_obs=False)
    rate = max(bench.run()[0] for _ in range(max(repeats, 1)))
    return {"layout": "asymmetric_advantages", "envs": batch, "steps": steps, "steps_per_s": rate,
            "compile_s": bench.compile_s}


def _child(name: str, args) -> dict:
    """One backbone in a fresh process (its own device-memory peak)."""
    cmd = [sys.executable, "-m", "omjax.bench", "gpu", "--models", name, "--no-env", "--in-process",
           "--seeds", str(args.seeds), "--prompt-tokens", str(args.prompt_tokens),
           "--update-decisions", str(args.update_decisions), "--repeats", str(args.repeats),
           "--base-sharding", args.base_sharding, "--model-devices", str(args.model_devices)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        return {"backbone": name, "error": f"exit status {done.returncode} (see stderr above)"}
    return json.loads(done.stdout.strip().splitlines()[-1])["backbones"][0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench gpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="test-sized configs (CPU); small batches")
    p.add_argument("--models", default=",".join(configs.PUBLISHED),
                   help=f"comma-separated backbones (default all: {', '.join(configs.PUBLISHED)})")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--prompt-tokens", type=int, default=None, help="default 768 (tiny: 32)")
    p.add_argument("--update-decisions", type=int, default=None,
                   help="decisions per adapter in the timed update (default 16; tiny: 8)")
    p.add_argument("--env-batch", type=int, default=None, help="JAX Overcooked envs (default 4096; tiny: 16)")
    p.add_argument("--env-steps", type=int, default=None, help="steps per timed env call (default 400; tiny: 10)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls after the compiling one (default 2; tiny: 1)")
    p.add_argument("--base-sharding", choices=BASE_SHARDING, default="auto",
                   help="the base over several devices, as config run.base_sharding (default auto: sharded "
                        "when the estimate exceeds one device's memory)")
    p.add_argument("--model-devices", type=int, default=0,
                   help="devices along the mesh's model axis, as config run.model_devices (0: choose)")
    p.add_argument("--no-env", action="store_true", help="skip the env steps/s measure")
    p.add_argument("--env-only", action="store_true", help="only the env steps/s measure")
    p.add_argument("--report", metavar="DIR",
                   help="merge the JSON lines of DIR/<backbone>.jsonl and DIR/env.jsonl (experiments/"
                        "gpu_check.sh) into DIR/gpu_check.json and DIR/gpu_check.md, measuring nothing")
    p.add_argument("--in-process", action="store_true",
                   help="run every backbone in this process (the default on the CPU)")
    args = p.parse_args(argv)
    if args.report:
        return write_report(Path(args.report))
    tiny = args.tiny
    for name, full, small in (("prompt_tokens", 768, 32), ("update_decisions", 16, 8), ("env_batch", 4096, 16),
                              ("env_steps", 400, 10), ("repeats", 2, 1)):
        if getattr(args, name) is None:
            setattr(args, name, small if tiny else full)
    for name in ("seeds", "prompt_tokens", "update_decisions", "env_batch", "env_steps", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.model_devices < 0 or (args.model_devices and jax.device_count() % args.model_devices):
        p.error(f"--model-devices {args.model_devices} must divide the {jax.device_count()} devices")
    names = [] if args.env_only else [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(configs.PUBLISHED))
    if unknown:
        p.error(f"unknown --models {unknown}; choose from {sorted(configs.PUBLISHED)}")
    device = jax.devices()[0]
    isolate = not args.in_process and device.platform != "cpu" and len(names) > 1
    t0 = time.perf_counter()
    rows = [_child(n, args) if isolate else bench_backbone(n, args) for n in names]
    out = {"bench": "gpu", "tiny": tiny, "backend": device.platform, "device": device.device_kind,
           "seeds": args.seeds, "backbones": rows}
    if not args.no_env:
        out["env"] = bench_env(args.env_batch, args.env_steps, args.repeats)
    out["wall_s"] = time.perf_counter() - t0
    print(json.dumps(out))
    return 0


def _gib(x) -> str:
    return "–" if x is None else f"{x / 2 ** 30:.1f}"


def write_report(out: Path) -> int:
    """gpu_check.json and gpu_check.md from the per-backbone and env JSON lines in `out`."""
    rows, env = [], None
    for name in configs.PUBLISHED:
        path = out / f"{name}.jsonl"
        if path.is_file():
            rows += json.loads(path.read_text().strip().splitlines()[-1])["backbones"]
    if (out / "env.jsonl").is_file():
        env = json.loads((out / "env.jsonl").read_text().strip().splitlines()[-1]).get("env")
    merged = {"bench": "gpu", "backend": jax.devices()[0].platform, "device": jax.devices()[0].device_kind,
              "backbones": rows, "env": env}
    (out / "gpu_check.json").write_text(json.dumps(merged, indent=1) + "\n")
    lines = [f"# omjax GPU check on {merged['device']}", "",
             "| backbone | params | decisions/s, 2 agents x 5 seeds | decisions/s, 7 agents x 5 seeds "
             "| update s (compile s) | peak GiB | estimate GiB |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['backbone']} | {r['error']} | | | | | |")
            continue
        u = r["update"]
        lines.append(f"| {r['backbone']} | {r['params'] / 1e9:.2f} B | {r['decide_A2']['decisions_per_s']:.0f} "
                     f"| {r['decide_A7']['decisions_per_s']:.0f} | {u['update_s']:.2f} ({u['compile_s']:.0f}) "
                     f"| {_gib(r['peak_bytes'])} | {_gib(u['estimate_bytes'])} |")
    if env and "error" not in env:
        lines += ["", f"JAX Overcooked ({env['layout']}, {env['envs']} envs, random actions): "
                      f"{env['steps_per_s']:,.0f} steps/s"]
    elif env:
        lines += ["", f"JAX Overcooked: {env['error']}"]
    if rows and "update" in rows[0]:
        u = rows[0]["update"]
        lines += ["", f"Update: {u['adapters']} adapters ({u['seeds']} seeds x {u['agents']} agents), "
                      f"{u['decisions_per_adapter']} decisions of {u['prompt_tokens']} tokens each, rank {u['rank']}, "
                      f"{u['epochs']} epochs of minibatch {u['minibatch']}, remat; decide rows pad to a power of two."]
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0

