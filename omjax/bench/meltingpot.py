"""`python -m omjax.bench meltingpot`: the adapters' cost over the raw Melting Pot engine.

For each game it times, on the same machine and in one run:

* raw: `meltingpot.substrate.build(name, roles)` stepped with uniform random actions (the
  substrate as Melting Pot ships it: per-player RGB views, WORLD.RGB, dm_env timesteps);
* adapter: `MeltingPotEnv.step` (symbolic state every step) plus, under a uniform random policy
  over the guarded option menus, a menu built for every agent whose option ended and one
  executor action per agent per step: the whole per-step cost an option-level rollout pays;
* decisions/s: option decisions per second of that uniform random policy.

Episode resets (an engine rebuild, about 1.5 s, the same for both) are excluded from the step
times. The last line is JSON: {"bench": "meltingpot", ...}.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from omjax.envs.meltingpot import engine, make
from omjax.options import meltingpot_common as mp
from omjax.options.menu import episode_rng
from omjax.options.registry import guard_path, load_game
from omjax.options.synthesis import read_guards

GAMES = {"cleanup": "clean_up", "harvest": "commons_harvest__open"}


def raw_steps_per_s(substrate: str, steps: int, seed: int) -> float:
    engine.config_module(substrate)  # registers the package without importing TensorFlow
    from meltingpot import substrate as mp_substrate  # noqa: PLC0415

    roles = engine.config_module(substrate).get_config().default_player_roles
    env = mp_substrate.build(substrate, roles=roles)
    env.reset()
    rng = np.random.default_rng(seed)
    n_act = env.action_spec()[0].num_values
    elapsed, done = 0.0, 0
    while done < steps:
        actions = rng.integers(0, n_act, len(roles)).tolist()
        t0 = time.perf_counter()
        ts = env.step(actions)
        elapsed += time.perf_counter() - t0
        done += 1
        if ts.last():
            env.reset()
    env.close()
    return done / elapsed


def adapter_rollout(game: str, variant: str, steps: int, seed: int) -> dict:
    """Uniform-random option rollout through the adapter; timings exclude resets."""
    lib_mod = load_game(game)
    lib = lib_mod.library(variant)
    guards = [g for g in read_guards(guard_path(game, variant), lib_mod.SCHEMA) if g.opt in lib.schema.option_names]
    env = make(game)
    ctx = mp.make_ctx(env, lib_mod.regions(env))
    rng = np.random.default_rng(seed)
    env_s = option_s = 0.0
    done = decisions = 0
    episode = 0
    while done < steps:
        state = env.reset(seed + episode)
        letters = [episode_rng(seed + episode, a) for a in range(env.num_agents)]
        episode += 1
        running: dict[int, mp.Execution] = {}
        while not state.done and done < steps:
            t0 = time.perf_counter()
            actions = np.full(env.num_agents, ctx.noop, np.int64)
            for a in range(env.num_agents):
                if a not in running:
                    items, insts = mp.menu(lib, ctx, state, a, guards, letters[a])
                    running[a] = mp.start(lib, ctx, state, a, insts[items[rng.integers(len(items))].index])
                    decisions += 1
                actions[a] = mp.act(lib, ctx, running[a], state)
            t1 = time.perf_counter()
            state = env.step(actions)
            t2 = time.perf_counter()
            for a, ex in list(running.items()):
                ex, outcome, _ = mp.advance(lib, ctx, ex, int(actions[a]), state)
                if outcome is None:
                    running[a] = ex
                else:
                    del running[a]
            option_s += (t1 - t0) + (time.perf_counter() - t2)
            env_s += t2 - t1
            done += 1
    env.close()
    return {"env_steps_per_s": done / env_s, "steps_per_s": done / (env_s + option_s),
            "decisions_per_s": decisions / (env_s + option_s), "call_ratio": decisions / (done * env.num_agents)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench meltingpot")
    p.add_argument("--steps", type=int, default=300, help="env steps timed per game and path")
    p.add_argument("--variant", default="lib_a", help="option library (registry variant) of both games")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"--steps must be >= 1, got {args.steps}")
    out = {"bench": "meltingpot", "steps": args.steps, "variant": args.variant}
    print(f"{'game':<9} {'raw steps/s':>12} {'adapter steps/s':>16} {'+options steps/s':>17} "
          f"{'cost ratio':>10} {'decisions/s':>12} {'call ratio':>10}")
    for game, substrate in GAMES.items():
        raw = raw_steps_per_s(substrate, args.steps, args.seed)
        ada = adapter_rollout(game, args.variant, args.steps, args.seed)
        ratio = raw / ada["steps_per_s"]  # time per step, adapter + options over raw
        print(f"{game:<9} {raw:>12.0f} {ada['env_steps_per_s']:>16.0f} {ada['steps_per_s']:>17.0f} "
              f"{ratio:>9.2f}x {ada['decisions_per_s']:>12.0f} {ada['call_ratio']:>10.2f}")
        out[game] = {"raw_steps_per_s": round(raw, 1),
                     "adapter_steps_per_s": round(ada["env_steps_per_s"], 1),
                     "adapter_with_options_steps_per_s": round(ada["steps_per_s"], 1),
                     "cost_ratio_vs_raw": round(ratio, 3),
                     "option_decisions_per_s": round(ada["decisions_per_s"], 1),
                     "call_ratio": round(ada["call_ratio"], 3)}
    print(json.dumps(out))
    return 0
