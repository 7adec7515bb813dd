"""How much cohort signal does one decision carry at a given episode length? (no LLM)

    python -m experiments.lab.credit_snr                                  # AA, horizons 20-100, K = 4 and 8
    python -m experiments.lab.credit_snr --horizons 20 40 --episodes 256 --rollouts 8 16
    python -m experiments.lab.credit_snr --horizons 10 --rollouts 16 --options place_in_pot   # another direction
    python -m experiments.lab.credit_snr --horizons 20 100 --rollouts 16 --credit episode reward_to_go
    python -m experiments.lab.credit_snr --horizons 150 --segment 10 --episodes 256 --rollouts 16 --credit reward_to_go

PA-MAGRPO credits every decision of rollout k with the same cohort-normalised team return A_k.
For a policy that picks uniformly from the shipped menus (what the frozen base amounts to under
per-decision letter shuffling), this measures the gradient that such a cohort gives along one
direction a policy could learn from the menu text: "pick `wait` / `drop_held` less". Per rollout,
S_k = sum over its decisions of (1[idle picked] - P(idle | menu)) is the score of that direction;
a cohort's estimate is g = sum_k A_k S_k. Over many cohorts drawn from a pool of episodes played
on training-style seeds (0, 1, ...; never the held-out 10000+), the signal-to-noise ratio
E[g] / std[g] says how reliably one cohort points the right way, and SNR^2 / (K x decisions per
rollout) how much of it each decision buys (independent cohorts add SNR^2). That is the signal
one adapter shared by the team gets (`train.shared_lora`); a per-agent adapter's gradient sees
only its own agent's decisions, S_k^i, and the table gives its SNR too. `--options` scores another
direction, "pick these options more" (by default `wait drop_held`, the idle ones). `--credit`
says what credits a decision, as `train.advantage` does (the trainer's own functions compute the
advantages): `episode`, the paper's whole-return A_k, or `reward_to_go`, A_{k,t} from the
return after the decision's step t (then S is scored per step: g = sum A_{k,t} S_{k,t}). The team
reward is the training one: real deliveries plus `env.reward_shaping` times Overcooked-AI's
shaped reward. `--segment S` plays the trainer's `train.segment`: each horizon is then the
episode's length, every cohort is the K continuations (S steps each) of its own root state,
reached by uniform picks shared by the cohort at a step drawn from [0, horizon - S], and
`--episodes` counts roots.

Prints one row per (horizon, K) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.paper import common
from experiments.lab.menu_policies import IDLE, play

from omjax.config import load_config
from omjax.games.registry import make_game
from omjax.options.libraries import resolve_library
from omjax.options.overcooked import SCHEMA
from omjax.train import grpo


def play_uniform(game, seeds: list[int], options=IDLE, starts: list[int] | None = None,
                 steps: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Uniform menu picks (`menu_policies.play`, with its `starts` and `steps` segments), one
    episode per seed. Returns the team's training reward at each step [n, T], the score
    [n, T, N] of picking one of `options` (each agent's picks at each step) and the decision
    count [n, N] of each episode and agent."""
    score = np.zeros((len(seeds), steps or game.horizon, game.n_agents))
    count = np.zeros((len(seeds), game.n_agents))

    def on_pick(k: int, i: int, menu, j: int, t: int) -> None:
        chosen = np.array([it.opt in options for it in menu], float)
        score[k, t, i] += chosen[j] - chosen.mean()
        count[k, i] += 1

    _, rewards = play(game, "uniform", seeds, on_pick, starts, steps)
    return rewards, score, count


_episode = jax.jit(jax.vmap(grpo.group_advantages))  # [D, K] -> [D, K]
def _reward_to_go_advantages(rewards):
    """[K, T] the cohort-normalised return from each step on (the removed `train.advantage:
    reward_to_go` credit, kept here as the probe's comparison)."""
    to_go = jnp.cumsum(rewards[:, ::-1], axis=1)[:, ::-1]  # [K, T]
    std = jnp.std(to_go, axis=0)  # [T]
    flat = std <= grpo.ZERO_SPREAD_TOL
    return jnp.where(flat, 0.0, (to_go - jnp.mean(to_go, axis=0)) / jnp.where(flat, 1.0, std)), jnp.all(flat)


_to_go = jax.jit(jax.vmap(_reward_to_go_advantages))  # [D, K, T] -> [D, K, T]


def cohort_snr(rewards: np.ndarray, score: np.ndarray, k: int, draws: int, rng: np.random.Generator,
               credit: str = "episode") -> float:
    """E[g] / std[g] of g = sum over a cohort's decisions of advantage x score, over cohorts of
    `k` episodes drawn without replacement from `rewards` [n, T] (score [n, T]); the advantages
    are the trainer's (`grpo`), so a cohort with no spread gives g = 0, as the trainer makes no
    update."""
    idx = np.stack([rng.choice(len(rewards), k, replace=False) for _ in range(draws)])  # [D, K]
    return snr(cohort_gradient(rewards[idx], score[idx], credit))


def cohort_gradient(rewards: np.ndarray, score: np.ndarray, credit: str = "episode") -> np.ndarray:
    """[D] g = sum over each cohort's decisions of advantage x score, for cohorts rewards and
    score [D, K, T]."""
    if credit == "episode":
        adv = np.asarray(_episode(jnp.asarray(rewards.sum(axis=-1), jnp.float32))[0])  # [D, K]
        return (adv * score.sum(axis=-1)).sum(axis=-1)
    adv = np.asarray(_to_go(jnp.asarray(rewards, jnp.float32))[0])  # [D, K, T]
    return (adv * score).sum(axis=(-2, -1))


def snr(g: np.ndarray) -> float:
    return float(g.mean() / g.std()) if g.std() > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", default="asymmetric_advantages")
    parser.add_argument("--horizons", nargs="+", type=int, default=[20, 30, 40, 60, 100])
    parser.add_argument("--rollouts", nargs="+", type=int, default=[4, 8], help="cohort sizes K")
    parser.add_argument("--episodes", type=int, default=128, help="pool of episodes per horizon")
    parser.add_argument("--draws", type=int, default=4000, help="cohorts drawn per (horizon, K)")
    parser.add_argument("--shaping", type=float, default=1.0, help="env.reward_shaping of the training return")
    parser.add_argument("--options", nargs="+", default=list(IDLE), help="the direction: pick these options more")
    parser.add_argument("--credit", nargs="+", default=["episode"], choices=["episode", "reward_to_go"],
                        help="what credits a decision (train.advantage)")
    parser.add_argument("--segment", type=int, default=0,
                        help="S > 0: rollouts play S-step segments of each horizon's episodes from shared "
                             "root states (train.segment); --episodes roots per K, one cohort each")
    args = parser.parse_args(argv)
    if args.segment and (args.segment > min(args.horizons) or args.episodes < 2):
        raise SystemExit(f"--segment {args.segment} needs every horizon >= it and --episodes >= 2 roots")
    if not args.segment and args.episodes < 2 * max(args.rollouts):
        raise SystemExit(f"--episodes must be >= 2 x the largest K ({2 * max(args.rollouts)}), "
                         f"got {args.episodes}")
    unknown = sorted(set(args.options) - {o.name for o in SCHEMA.options})
    if unknown:
        raise SystemExit(f"--options: unknown Overcooked option(s) {unknown}; "
                         f"known: {[o.name for o in SCHEMA.options]}")
    rng = np.random.default_rng(0)
    rows = []
    print("| horizon | segment | decisions / episode | training return | corr(R, S) | credit | K "
          "| cohort SNR, shared adapter | SNR^2 per 1,000 decisions | cohort SNR, per-agent adapters (agent 0 / 1) "
          "| SNR^2 per 1,000 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for horizon in args.horizons:
        cfg = resolve_library(load_config(common.CONFIGS / "quickstart_overcooked_smollm2.yaml",
                                          [f"env.layout={args.layout}", f"env.horizon={horizon}",
                                           f"env.reward_shaping={args.shaping}"]))
        game = make_game(cfg.env, cfg.policy.action_interface)
        # Whole episodes: one pool per horizon, cohorts drawn from it (all start at the reset
        # state). Segments: per K, --episodes roots, each with its own cohort of K continuations.
        for pool_k in (args.rollouts if args.segment else [None]):
            t0 = time.time()
            if args.segment:
                starts = rng.integers(0, horizon - args.segment + 1, args.episodes).tolist()
                seeds = list(range(args.episodes * pool_k))
            else:
                starts, seeds = None, list(range(args.episodes))
            # [n, T], [n, T, N], [n, N]
            rewards, score, count = play_uniform(game, seeds, tuple(args.options), starts, args.segment or None)
            ret, team_score, team_count = rewards.sum(axis=1), score.sum(axis=(1, 2)), count.sum(axis=1)
            corr = (float(np.corrcoef(ret, team_score)[0, 1]) if ret.std() > 0 and team_score.std() > 0 else 0.0)
            for credit in args.credit:
                for k in ([pool_k] if args.segment else args.rollouts):
                    def value(sc: np.ndarray) -> float:
                        if not args.segment:
                            return cohort_snr(rewards, sc, k, args.draws, rng, credit)
                        cohorts = lambda x: x.reshape(args.episodes, k, *x.shape[1:])  # [roots, K, T]
                        return snr(cohort_gradient(cohorts(rewards), cohorts(sc), credit))

                    # One shared adapter's gradient sees every agent's decisions (the team's S); a
                    # private adapter's sees only its agent's own (S_i): less of the same signal.
                    shared = value(score.sum(axis=2))
                    per_kdec = 1000 * shared ** 2 / (k * team_count.mean())
                    own = [value(score[:, :, i]) for i in range(score.shape[2])]
                    own_kdec = [1000 * v ** 2 / (k * count[:, i].mean()) for i, v in enumerate(own)]
                    rows.append({"layout": args.layout, "options": args.options, "horizon": horizon,
                                 "segment": args.segment, "credit": credit,
                                 "decisions_per_episode": float(team_count.mean()),
                                 "return_mean": float(ret.mean()), "return_std": float(ret.std()), "corr": corr,
                                 "K": k, "snr": shared, "snr2_per_1000_decisions": per_kdec, "snr_per_agent": own,
                                 "snr2_per_1000_decisions_per_agent": own_kdec, "seconds": time.time() - t0})
                    print(f"| {horizon} | {args.segment or '-'} | {team_count.mean():.1f} | {ret.mean():.1f} ± "
                          f"{ret.std():.1f} | {corr:+.3f} | {credit} | {k} | {shared:+.3f} | {per_kdec:.3f} | "
                          f"{' / '.join(f'{v:+.3f}' for v in own)} | {' / '.join(f'{v:.3f}' for v in own_kdec)} |",
                          flush=True)
        game.close()
    print(json.dumps({"experiment": "credit_snr", "episodes": args.episodes, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
