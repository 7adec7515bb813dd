"""`omjax rollout`: random-policy Overcooked rollouts; prints each episode's team return.

Episodes run `--num-envs` at a time as one jitted, vmapped `lax.scan` of the JAX env, each agent
taking uniform random actions for the whole horizon.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from omjax.envs.overcooked.env import Overcooked, random_actions
from omjax.envs.overcooked.layout import list_layouts


def _positive(name: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omjax rollout", description=__doc__.split("\n")[0])
    parser.add_argument("--layout", default="cramped_room", help="any overcooked_ai_py layout name")
    parser.add_argument("--episodes", type=_positive("--episodes"), default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--horizon", type=_positive("--horizon"), default=400)
    parser.add_argument("--num-envs", type=_positive("--num-envs"), default=8,
                        help="episodes run in parallel per batch")
    parser.add_argument("--random-start", action="store_true", help="random distinct start cells")
    parser.add_argument("--out", default=None, help="also write one JSON line per episode here")
    return parser


def run_episodes(layout: str, episodes: int, seed: int, horizon: int, num_envs: int,
                 random_start: bool = False, progress: bool = True) -> list[dict]:
    """Random-policy episodes; one dict per episode (team return, deliveries, soups plated, ...)."""
    env = Overcooked(layout, horizon=horizon, random_start=random_start)

    @jax.jit
    def batch(key):
        size = num_envs
        k_reset, k_act = jax.random.split(key)
        _, state = jax.vmap(env.reset)(jax.random.split(k_reset, size))
        actions = random_actions(k_act, (horizon, size, env.num_agents))  # [T, B, A]

        def body(state, joint):  # joint [B, A]
            _, state, rewards, _, infos = jax.vmap(env.step_env, in_axes=(None, 0, 0))(k_act, state, joint)
            counts = {name: jnp.sum(infos["events"][name], axis=-1)
                      for name in ("soup_delivery", "soup_pickup", "potting_onion", "cook_start")}
            return state, (rewards[env.agents[0]], counts)

        _, (rewards, counts) = jax.lax.scan(body, state, actions)
        return jnp.sum(rewards, axis=0), {k: jnp.sum(v, axis=0) for k, v in counts.items()}

    results = []
    key = jax.random.PRNGKey(seed)
    starts = range(0, episodes, num_envs)
    for start in tqdm.tqdm(starts, desc=f"rollout {layout}", disable=not progress, file=sys.stderr):
        key, sub = jax.random.split(key)
        # The last batch runs full size too (one compilation) and keeps only the episodes asked for.
        returns, counts = jax.tree.map(np.asarray, batch(sub))
        for b in range(min(num_envs, episodes - start)):
            results.append({"episode": start + b, "layout": layout, "seed": seed, "horizon": horizon,
                            "team_return": float(returns[b]),
                            **{k: int(v[b]) for k, v in counts.items()}})
    return results


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv if argv is None else argv)
    args = build_parser().parse_args(argv[1:])
    if args.layout not in list_layouts():
        print(f"omjax rollout: unknown layout {args.layout!r}; known: {', '.join(list_layouts())}",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = run_episodes(args.layout, args.episodes, args.seed, args.horizon, args.num_envs,
                           args.random_start)
    elapsed = time.perf_counter() - t0
    for r in results:
        print(f"episode {r['episode']:>4}  team return {r['team_return']:6.1f}  "
              f"deliveries {r['soup_delivery']}  soups plated {r['soup_pickup']}  "
              f"onions potted {r['potting_onion']}  cooks started {r['cook_start']}")
    returns = [r["team_return"] for r in results]
    print(f"{args.layout}: {len(results)} episodes x {args.horizon} steps, mean team return "
          f"{sum(returns) / len(returns):.2f} (max {max(returns):.1f}) in {elapsed:.1f}s")
    if args.out:
        with open(args.out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    return 0
