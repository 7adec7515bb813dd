"""Regenerate `states_<game>.npz`: symbolic states of option-level rollouts on the real engine.

    python tests/data/meltingpot/record_states.py

Every agent runs a uniform random choice over its guardless `lib_a` menu (as in the burn-in), for
whole episodes of seeds 0, 1, ... until at least 1,000 states are recorded per game. Fields:
step, pos [N, A, 2], ori [N, A], alive [N, A], apples / dirt [N, H, W] (bit-packed per state,
`np.unpackbits(..., count=H * W)`), patch_apples [N, P], seed [N]. Episodes are reproducible
(omjax.envs.meltingpot.engine.pin_luajit_seed), so a rerun writes the same states.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from omjax.envs.meltingpot import make
from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.options import meltingpot as mp
from omjax.games.registry import library

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_STATES = 1000


def record(game: str, min_states: int = MIN_STATES) -> dict[str, np.ndarray]:
    module = library(game)
    lib = module.library("lib_a")
    env = make(game)
    ctx = mp.make_ctx(env, module.regions(env))
    rows: list[tuple[int, SymbolicState]] = []
    seed = 0
    while len(rows) < min_states:
        rng = np.random.default_rng([seed, 11])
        state = env.reset(seed)
        running: dict[int, mp.Execution] = {}
        rows.append((seed, state))
        while not state.done:
            actions = np.full(env.num_agents, ctx.noop, np.int64)
            for a in range(env.num_agents):
                if a not in running:
                    insts = mp.instances_for(lib, ctx, state, a)
                    running[a] = mp.start(lib, ctx, state, a, insts[rng.integers(len(insts))])
                actions[a] = mp.act(lib, ctx, running[a], state)
            state = env.step(actions)
            rows.append((seed, state))
            for a, ex in list(running.items()):
                ex, outcome, _ = mp.advance(lib, ctx, ex, int(actions[a]), state)
                running[a] = ex
                if outcome is not None:
                    del running[a]
        seed += 1
    env.close()
    states = [s for _, s in rows]
    return {
        "seed": np.array([k for k, _ in rows], np.int32),
        "step": np.array([s.step for s in states], np.int32),
        "pos": np.stack([s.pos for s in states]).astype(np.int16),
        "ori": np.stack([s.ori for s in states]).astype(np.int8),
        "alive": np.stack([s.alive for s in states]),
        "apples": np.stack([np.packbits(s.apples.ravel()) for s in states]),
        "dirt": np.stack([np.packbits(s.dirt.ravel()) for s in states]),
        "patch_apples": np.stack([s.patch_apples for s in states]).astype(np.int16),
        "shape": np.array(states[0].apples.shape, np.int32),
    }


def load_states(path: str) -> list[SymbolicState]:
    """The recorded states of a `states_<game>.npz` (reward / ate / cleaned are not recorded: zeros)."""
    z = np.load(path)
    h, w = (int(v) for v in z["shape"])
    out = []
    for k in range(len(z["step"])):
        a = z["pos"].shape[1]
        out.append(SymbolicState(
            step=int(z["step"][k]), pos=z["pos"][k].astype(np.int32), ori=z["ori"][k].astype(np.int32),
            alive=z["alive"][k].astype(bool),
            apples=np.unpackbits(z["apples"][k], count=h * w).reshape(h, w).astype(bool),
            dirt=np.unpackbits(z["dirt"][k], count=h * w).reshape(h, w).astype(bool),
            reward=np.zeros(a, np.float32), ate=np.zeros(a, np.int32), cleaned=np.zeros(a, np.int32),
            patch_apples=z["patch_apples"][k].astype(np.int32), done=False))
    return out


if __name__ == "__main__":
    for game in sys.argv[1:] or ("cleanup", "harvest"):
        cols = record(game)
        path = os.path.join(HERE, f"states_{game}.npz")
        np.savez_compressed(path, **cols)
        print(f"{game}: {len(cols['step'])} states -> {path}")
