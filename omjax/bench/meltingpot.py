"""`python -m omjax.bench meltingpot`: the adapters' cost over the raw Melting Pot engine.

For each game it times, on the same machine and in one run:

* raw: `meltingpot.substrate.build(name, roles)` stepped with uniform random actions (the
  substrate as Melting Pot ships it: per-player RGB views, WORLD.RGB, dm_env timesteps);
* adapter: `MeltingPotEnv.step` (symbolic state every step) plus, under a uniform random policy
  over the guarded option menus, a menu built for every agent whose option ended and one
  executor action per agent per step: the whole per-step cost an option-level rollout pays;
* decisions/s: option decisions per second of that uniform random policy.

The two are stepped alternately, one step each, so that other load on the machine slows both
alike. Episode resets (an engine rebuild, about 1.5 s, the same for both) are excluded from the
step times; the executors' memoised distance maps start cold, as in a fresh training process.
The last line is JSON: {"bench": "meltingpot", ...}.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from omjax.envs.meltingpot import engine, make
from omjax.games.meltingpot import SUBSTRATES
from omjax.games.registry import guard_path, library
from omjax.options import meltingpot as mp
from omjax.options.menu import episode_rng
from omjax.options.synthesis import read_guards


class _Raw:
    """The substrate as Melting Pot ships it, stepped with uniform random actions."""

    def __init__(self, substrate: str, seed: int):
        engine.config_module(substrate)  # registers the package without importing TensorFlow
        from meltingpot import substrate as mp_substrate  # noqa: PLC0415

        self.roles = engine.config_module(substrate).get_config().default_player_roles
        self.env = mp_substrate.build(substrate, roles=self.roles)
        self.env.reset()
        self.rng = np.random.default_rng(seed)
        self.n_act = self.env.action_spec()[0].num_values

    def step(self) -> float:
        actions = self.rng.integers(0, self.n_act, len(self.roles)).tolist()
        t0 = time.perf_counter()
        ts = self.env.step(actions)
        elapsed = time.perf_counter() - t0
        if ts.last():
            self.env.reset()
        return elapsed


class _Options:
    """The adapter under a uniform random policy over the guarded option menus."""

    def __init__(self, game: str, variant: str, seed: int):
        libraries = library(game)
        self.lib = libraries.library(variant)
        names = self.lib.schema.option_names
        self.guards = [g for g in read_guards(guard_path(game, variant), libraries.SCHEMA) if g.opt in names]
        self.env = make(game)
        self.ctx = mp.make_ctx(self.env, libraries.regions(self.env))
        self.rng = np.random.default_rng(seed)
        self.seed, self.episode = seed, 0
        self.decisions = 0
        self._reset()

    def _reset(self) -> None:
        self.state = self.env.reset(self.seed + self.episode)
        self.letters = [episode_rng(self.seed + self.episode, a) for a in range(self.env.num_agents)]
        self.episode += 1
        self.running: dict[int, mp.Execution] = {}

    def step(self) -> tuple[float, float]:
        """(env seconds, option seconds) of one joint step."""
        lib, ctx, state = self.lib, self.ctx, self.state
        t0 = time.perf_counter()
        actions = np.full(self.env.num_agents, ctx.noop, np.int64)
        for a in range(self.env.num_agents):
            if a not in self.running:
                items, insts = mp.menu(lib, ctx, state, a, self.guards, self.letters[a])
                self.running[a] = mp.start(lib, ctx, state, a, insts[items[self.rng.integers(len(items))].index])
                self.decisions += 1
            actions[a] = mp.act(lib, ctx, self.running[a], state)
        t1 = time.perf_counter()
        self.state = state = self.env.step(actions)
        t2 = time.perf_counter()
        for a, ex in list(self.running.items()):
            ex, outcome, _ = mp.advance(lib, ctx, ex, int(actions[a]), state)
            if outcome is None:
                self.running[a] = ex
            else:
                del self.running[a]
        t3 = time.perf_counter()
        if state.done:
            self._reset()
        return t2 - t1, (t1 - t0) + (t3 - t2)


def compare(game: str, substrate: str, variant: str, steps: int, seed: int) -> dict:
    """Raw and adapter steps interleaved one by one, so load on the machine hits both alike."""
    raw, opts = _Raw(substrate, seed), _Options(game, variant, seed)
    raw_s = env_s = option_s = 0.0
    for _ in range(steps):
        raw_s += raw.step()
        e, o = opts.step()
        env_s += e
        option_s += o
    raw.env.close()
    opts.env.close()
    return {"raw_steps_per_s": steps / raw_s, "env_steps_per_s": steps / env_s,
            "steps_per_s": steps / (env_s + option_s), "decisions_per_s": opts.decisions / (env_s + option_s),
            "call_ratio": opts.decisions / (steps * opts.env.num_agents)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench meltingpot")
    p.add_argument("--steps", type=int, default=600, help="env steps timed per game and path")
    p.add_argument("--variant", default="lib_a", help="option library (registry variant) of both games")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1:
        raise SystemExit(f"--steps must be >= 1, got {args.steps}")
    out = {"bench": "meltingpot", "steps": args.steps, "variant": args.variant}
    print(f"{'game':<9} {'raw steps/s':>12} {'adapter steps/s':>16} {'+options steps/s':>17} "
          f"{'cost ratio':>10} {'decisions/s':>12} {'call ratio':>10}")
    for game, substrate in SUBSTRATES.items():
        ada = compare(game, substrate, args.variant, args.steps, args.seed)
        raw = ada["raw_steps_per_s"]
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
