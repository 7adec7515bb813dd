"""How much there is to learn in a game setting: scripted menu policies, no LLM.

    python -m experiments.lab.menu_policies                                   # AA and cramped_room, 100 steps
    python -m experiments.lab.menu_policies --layouts cramped_room --horizon 200 --episodes 64
    python -m experiments.lab.menu_policies --layouts asymmetric_advantages --horizon 150 --episodes 256 \
        --policies uniform no_idle half_idle --power 16 32 64     # what a held-out test can detect
    python -m experiments.lab.menu_policies --layouts asymmetric_advantages --horizon 150 --episodes 32 \
        --policies uniform q_greedy q_soft                       # what train.advantage=uniform_q rates
    python -m experiments.lab.menu_policies --layouts asymmetric_advantages --horizon 150 --episodes 128 \
        --policies uniform no_idle name_soft --name-beta 0.5 1 2 4 --power 16 32   # names alone
    python -m experiments.lab.menu_policies --layouts asymmetric_advantages --horizon 150 --episodes 128 \
        --policies uniform name_soft --labels value rank greedy --q-rollouts 32 --power 16  # per label
    python -m experiments.lab.menu_policies --layouts asymmetric_advantages --horizon 150 --episodes 128 \
        --policies uniform name_soft --critic-keys name state --q-rollouts 32 --power 16  # keyed by state

Each policy picks from the same menus the LLM sees (the shipped option library, guards and
letter shuffle; the library the config's seed draws, as in `learning.py`): `uniform` picks any
entry with equal probability (what a frozen base that reads letters, not labels, amounts to
under per-decision shuffling); `no_idle` never picks `wait` or `drop_held` when anything else is
offered, the simplest behaviour a policy could learn from the menu text (`half_idle` and the
`no_idle_when_*` policies learn it in part: `pick`); `q_greedy` and `q_soft` read the state
through the action values `train.advantage=uniform_q` credits decisions with (best option;
softmax at temperature 2), what a policy trained on them could reach; `name_soft` prefers option
names, whatever the state (the kind of preference the SmolLM2 menu bandit learns to read from
shuffled menus): it picks an entry with weight exp(beta x w[name]), w the mean Q_u advantage of
each name over the uniform picks of `--fit-episodes` other training-style episodes (seeds 1000+),
in units of its sd, one row per `--name-beta` (and per `--labels`: w fitted to the rank or greedy
labels of Q_u that `train.q_label` can credit instead of its value; per `--critic-keys`: w keyed
by option name and the entry's read-set features, `train.critic_keys=state`). Episodes use the
training-style seeds 0, 1, ... (never the held-out 10000+), so this sizes a setting before any
held-out episode is played. Prints a table of real deliveries per episode (mean, 95 % bootstrap
CI, share of episodes that deliver) and one JSON line.

`--power N ..` sizes the held-out comparison of `learning.py` (trained vs frozen, two-sided
Mann-Whitney on deliveries, N episodes each): for every policy against `uniform`, the share of
N-vs-N samples drawn from the played episodes that reach p < 0.05, and their median p.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from experiments.paper import common

from omjax.config import CRITIC_KEYS, load_config
from omjax.eval.stats import bootstrap_ci, mann_whitney
from omjax.games.registry import make_game
from omjax.options.libraries import resolve_library
from omjax.train.continuation import (UniformQ, entry_keys, name_weights,
                                      uniform_menus)
from omjax.train.continuation import entry_labels as value_labels

ENTRY_LABELS = ("value", "rank", "greedy")
"""Labels of one menu's Q_u this probe can fit name weights to (the trainer's critic uses "value")."""


def entry_labels(q: np.ndarray, label: str = "value") -> np.ndarray:
    """[n] each entry's label from the menu's Q_u [n]: "value" Q_u - mean (`continuation.entry_labels`);
    "rank" the centred rank in [-1/2, 1/2] (ties share their mean rank); "greedy" 1 / m at the m
    best entries less 1 / n. Each sums to zero over the menu; a one-entry menu is 0."""
    if label not in ENTRY_LABELS:
        raise ValueError(f"unknown Q_u label {label!r}; known: {', '.join(ENTRY_LABELS)}")
    q = np.asarray(q, np.float64)
    n = len(q)
    if label == "value" or n < 2:
        return value_labels(q)
    if label == "greedy":
        best = q == q.max()
        return best / best.sum() - 1.0 / n
    below = (q[None, :] < q[:, None]).sum(axis=1)
    ties = (q[None, :] == q[:, None]).sum(axis=1)
    return (below + (ties - 1) / 2 - (n - 1) / 2) / (n - 1)

from omjax.train.rollout import segment_plan, walk_entry

IDLE = ("wait", "drop_held")


# Where the `no_idle_when_*` policies skip the idle options, read from the menu itself: a menu
# offering `place_in_pot` (an onion in hand and a pot that takes it), one offering `pick_onion`
# (empty hands), or one offering neither (mostly a dish or a soup in hand).
WHEN = {
    "no_idle_when_onion": lambda opts: "place_in_pot" in opts,
    "no_idle_when_empty": lambda opts: "pick_onion" in opts,
    "no_idle_when_dish_or_soup": lambda opts: not {"place_in_pot", "pick_onion"} & opts,
}
# Policies that read the game's state through `train.advantage=uniform_q`'s action values Q_u
# (`omjax.train.continuation`): `q_greedy` takes a best option, `q_soft` samples exp(Q_u / 2).
Q_POLICIES = {"q_greedy": 0.0, "q_soft": 2.0}
POLICIES = ("uniform", "no_idle", "half_idle", *WHEN, *Q_POLICIES, "name_soft")
FIT_SEED0 = 1000
"""First seed of `name_soft`'s fit episodes (training-style, apart from the played 0, 1, ...)."""


def menu_values(menu, q: np.ndarray) -> np.ndarray:
    """[len(menu)] the Q_u of each menu entry, from `q` [I] over the library's instances."""
    return np.asarray(q)[[it.index for it in menu]]


def pick(policy: str, menu, rng: np.random.Generator, q: np.ndarray | None = None,
         names: dict[str, float] | None = None, keys: list[str] | None = None) -> int:
    """Menu position chosen by a scripted policy (`POLICIES`): `uniform`; `no_idle` (never an idle
    option while anything else is offered); `half_idle` (idle entries at half the weight of the
    others); `no_idle_when_*` (`no_idle` in those menus only, uniform elsewhere); `q_greedy` /
    `q_soft` (from `q` [I], the decision's Q_u of every library instance); `name_soft` (weight
    exp(names[key]) per entry, the key its option name or `keys[j]` where given
    (`continuation.entry_keys`), 0 for a key not in `names`)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; known: {POLICIES}")
    if policy == "name_soft":
        if names is None:
            raise ValueError("policy 'name_soft' needs names (a log-weight per option name)")
        keys = [it.opt for it in menu] if keys is None else keys
        logits = np.array([names.get(key, 0.0) for key in keys])
        weight = np.exp(logits - logits.max())
        return int(rng.choice(len(menu), p=weight / weight.sum()))
    if policy in Q_POLICIES:
        vals = menu_values(menu, q)
        tau = Q_POLICIES[policy]
        if tau == 0:
            return int(rng.choice(np.flatnonzero(vals == vals.max())))
        weight = np.exp((vals - vals.max()) / tau)
        return int(rng.choice(len(menu), p=weight / weight.sum()))
    idle = np.array([it.opt in IDLE for it in menu])
    if policy == "half_idle":
        weight = np.where(idle, 0.5, 1.0)
        return int(rng.choice(len(menu), p=weight / weight.sum()))
    if policy == "uniform" or (policy in WHEN and not WHEN[policy]({it.opt for it in menu})):
        return int(rng.integers(len(menu)))
    busy = np.flatnonzero(~idle)
    return int(rng.choice(busy)) if len(busy) else int(rng.integers(len(menu)))


def power(x: np.ndarray, y: np.ndarray, n: int, draws: int, rng: np.random.Generator,
          alpha: float = 0.05) -> tuple[float, float]:
    """(share of draws with p < alpha, median p) of a two-sided Mann-Whitney test of n episodes
    drawn with replacement from `x` against n from `y` (episode scores [*])."""
    ps = np.array([mann_whitney(rng.choice(x, n), rng.choice(y, n)).p_value for _ in range(draws)])
    return float(np.mean(ps < alpha)), float(np.median(ps))


def play(game, policy: str, seeds: list[int], on_pick=None, starts: list[int] | None = None,
         steps: int | None = None, walks: list[np.random.Generator] | None = None,
         q_values: UniformQ | None = None, names: dict[str, float] | None = None,
         keys_by: str = "name") -> tuple[np.ndarray, np.ndarray]:
    """One episode per seed, all stepped together. Returns each episode's team deliveries [n]
    and its training reward at each step (the games' step rewards, progress bonus included)
    [n, T]. `on_pick(k, i, menu, j, t)`, if given, sees every pick (agent i of episode k chose
    position j of `menu` at step t).

    `starts` [B] and `steps` play segments as the trainer's `train.segment` does
    (`rollout.collect_group`): the seeds split into B equal cohorts, cohort b's episodes walk
    together for `starts[b]` steps (`rollout.walk_entry`, one draw per cohort, agent and step,
    from `walks[b]`; default: a stream per cohort index) and `policy` then plays `steps` steps
    (default: to the horizon); the deliveries, rewards (T = steps) and the picks' t are the
    segment's. With a training run's starts and `rollout.walk_rng(seed, round)` streams, the
    cohorts start from that run's root states. The `q_*` policies read `q_values` (a
    `continuation.UniformQ` of `game`), `name_soft` its `names` (keyed as `keys_by`:
    `continuation.entry_keys`)."""
    if policy in Q_POLICIES and q_values is None:
        raise ValueError(f"policy {policy!r} needs q_values (a UniformQ of the game)")
    n, total = game.n_agents, len(seeds)
    starts = [0] * total if starts is None else starts
    if total % len(starts):
        raise ValueError(f"{total} seeds do not split into {len(starts)} cohorts")
    start_of, steps = segment_plan(starts, total // len(starts), game.horizon, steps)  # [n], T
    game.reset(seeds)
    letter_rngs = [[np.random.default_rng([s, i]) for i in range(n)] for s in seeds]
    pick_rngs = [np.random.default_rng([s, 1 << 20]) for s in seeds]
    walk_rngs = walks if walks is not None else [np.random.default_rng([b, 1 << 22]) for b in range(len(starts))]
    if len(walk_rngs) != len(starts):
        raise ValueError(f"{len(walk_rngs)} walk streams for {len(starts)} cohorts")
    choices = np.zeros((total, n), np.int32)
    rewards = np.zeros((total, steps))
    units = np.zeros(total)
    for t in range(int(start_of.max()) + steps):
        units[start_of == t] -= game.agent_returns().sum(axis=1)[start_of == t]
        walk: dict = {}
        pending = np.argwhere(game.needs_decision())
        q = {}
        if policy in Q_POLICIES:
            deciding = [(int(k), int(i)) for k, i in pending if t >= start_of[k]]
            if deciding:
                vals, _ = q_values.estimate([game.snapshot(k) for k, _ in deciding], [i for _, i in deciding],
                                            jax.random.fold_in(jax.random.PRNGKey(seeds[0]), t))
                q = dict(zip(deciding, vals))
        for k, i in pending:
            menu = game.menu(int(k), int(i), letter_rngs[k][i])
            if t < start_of[k]:
                cohort = int(k) * len(starts) // total
                if (cohort, i) not in walk:
                    walk[(cohort, i)] = walk_entry(menu, walk_rngs[cohort])
                choices[k, i] = walk[(cohort, i)].index
                continue
            keys = (None if keys_by == "name" or policy != "name_soft"
                    else entry_keys(game.lib, game.snapshot(int(k))[0], int(i), menu, keys_by))
            j = pick(policy, menu, pick_rngs[k], q.get((int(k), int(i))), names, keys)
            if on_pick is not None and t < start_of[k] + steps:
                on_pick(int(k), int(i), menu, j, t - int(start_of[k]))
            choices[k, i] = menu[j].index
        reward = np.asarray(game.step(choices), float)
        playing = (start_of <= t) & (t < start_of + steps)
        rewards[playing, t - start_of[playing]] = reward[playing]
        ended = start_of + steps == t + 1
        units[ended] += game.agent_returns().sum(axis=1)[ended]
    return units, rewards


def fit_name_weights(game, q_values: UniformQ, seeds: list[int], labels: tuple[str, ...] = ("value",),
                     keys_by: str = "name") -> dict[str, tuple[dict[str, float], float]]:
    """Per Q_u label (`continuation.entry_labels`, what `train.q_label` credits entries with):
    the mean label of each option name over the uniform picks of one episode per seed
    (`continuation.uniform_menus`, the trainer's `train.critic_burnin`), in units of the sd of all
    labels (decisions offering one entry carry none and are left out): the state-independent
    preference `name_soft` scales by beta; and the share of the labels' variance the names explain
    (R^2: what a preference over names can follow, the signal a policy that reads names gets per
    decision). `keys_by="state"`: per option name and read-set features instead
    (`continuation.entry_keys`)."""
    menus = uniform_menus(game, q_values, seeds, keys_by)
    if not menus:
        raise ValueError(f"no decision of the {len(seeds)} fit episodes offered two options")
    names = [ns for ns, _ in menus]
    return {label: name_weights(names, [entry_labels(vals, label) for _, vals in menus])[:2] for label in labels}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", nargs="+", default=["asymmetric_advantages", "cramped_room"])
    parser.add_argument("--horizon", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--policies", nargs="+", default=["uniform", "no_idle"], choices=POLICIES)
    parser.add_argument("--power", nargs="*", type=int, default=[], metavar="N",
                        help="held-out episodes per side of a trained-vs-frozen test to size")
    parser.add_argument("--draws", type=int, default=1000, help="samples per power estimate")
    parser.add_argument("--q-horizon", type=int, default=20, help="q_* policies: steps per continuation")
    parser.add_argument("--q-rollouts", type=int, default=8, help="q_* policies: continuations per option")
    parser.add_argument("--name-beta", nargs="+", type=float, default=[1.0],
                        help="name_soft: strengths of the name preference (one row each)")
    parser.add_argument("--labels", nargs="+", default=["value"], choices=ENTRY_LABELS,
                        help="name_soft: the Q_u labels (train.q_label) its name weights are fitted to, rows for each")
    parser.add_argument("--critic-keys", nargs="+", default=["name"], choices=CRITIC_KEYS,
                        help="name_soft: what its weights are keyed by (train.critic_keys), rows for each")
    parser.add_argument("--fit-episodes", type=int, default=16,
                        help=f"name_soft: uniform episodes (seeds {FIT_SEED0}+) its name weights are fitted on")
    args = parser.parse_args(argv)
    if args.episodes < 2:
        raise SystemExit(f"--episodes must be >= 2 (a bootstrap CI needs them), got {args.episodes}")
    if args.fit_episodes < 1:
        raise SystemExit(f"--fit-episodes must be >= 1, got {args.fit_episodes}")
    if args.power and "uniform" not in args.policies:
        raise SystemExit("--power compares each policy with `uniform` (the frozen base): add it to --policies")
    if any(n < 2 for n in args.power):
        raise SystemExit(f"--power needs N >= 2 episodes per side, got {args.power}")
    rows = []
    print("| layout | horizon | policy | episodes | deliveries (mean) | 95 % CI | episodes delivering | s |")
    print("|---|---|---|---|---|---|---|---|")
    for layout in args.layouts:
        # The library the learning runs play: the one the config's seed (0) draws.
        cfg = resolve_library(load_config(common.CONFIGS / "quickstart_overcooked_smollm2.yaml",
                                          [f"env.layout={layout}", f"env.horizon={args.horizon}"]))
        game = make_game(cfg.env, cfg.policy.action_interface)
        played = {}
        runs = [(p, None) for p in args.policies if p != "name_soft"]
        if "name_soft" in args.policies:
            fits = {}
            for by in args.critic_keys:
                t0 = time.time()
                fitted = fit_name_weights(game, UniformQ(game, args.q_horizon, args.q_rollouts),
                                          list(range(FIT_SEED0, FIT_SEED0 + args.fit_episodes)), tuple(args.labels),
                                          keys_by=by)
                for q_label, (weights, r2) in fitted.items():
                    fits[(by, q_label)] = (weights, r2)
                    shown = sorted(weights.items(), key=lambda kv: -abs(kv[1]))[:24 if by == "state" else None]
                    print(f"name_soft weights by {by} (mean {q_label} label of Q_u / sd, {args.fit_episodes} uniform "
                          f"episodes, {time.time() - t0:.0f} s; {len(weights)} keys explain {r2:.0%} of the labels' "
                          "variance" + ("; the 24 largest" if by == "state" else "") + "): "
                          + ", ".join(f"{k} {v:+.2f}" for k, v in shown), flush=True)
            runs += [("name_soft", (by, q_label, beta)) for by in args.critic_keys for q_label in args.labels
                     for beta in args.name_beta]
        for policy, fit in runs:
            t0 = time.time()
            q_values = UniformQ(game, args.q_horizon, args.q_rollouts) if policy in Q_POLICIES else None
            weights, r2 = fits[fit[:2]] if fit else (None, None)
            names = None if fit is None else {k: fit[2] * v for k, v in weights.items()}
            tag = "" if fit is None else ",".join(
                ([fit[0]] if len(args.critic_keys) > 1 else []) + ([fit[1]] if len(args.labels) > 1 else []))
            label = policy if fit is None else f"{policy}" + (f"[{tag}]" if tag else "") + f"@{fit[2]:g}"
            units, _ = play(game, policy, list(range(args.episodes)), q_values=q_values, names=names,
                            keys_by=fit[0] if fit else "name")
            played[label] = units
            ci = bootstrap_ci(units.tolist())
            row = {"layout": layout, "horizon": args.horizon, "policy": label, "episodes": args.episodes,
                   "deliveries_mean": ci.mean, "ci95": [ci.low, ci.high],
                   "delivering": float(np.mean(units > 0)), "seconds": time.time() - t0}
            if fit is not None:
                row["critic_keys"], row["q_label"], row["name_weights"], row["name_r2"] = fit[0], fit[1], weights, r2
            rows.append(row)
            print(f"| {layout} | {args.horizon} | {label} | {args.episodes} | {ci.mean:.2f} | "
                  f"[{ci.low:.2f}, {ci.high:.2f}] | {row['delivering']:.0%} | {row['seconds']:.0f} |", flush=True)
        game.close()
        if args.power:
            print(f"\n| layout | policy vs uniform | N per side | P(p < 0.05) | median p |\n|---|---|---|---|---|")
        rng = np.random.default_rng(0)
        for row in rows[-len(runs):] if args.power else []:
            if row["policy"] == "uniform":
                continue
            row["power"] = {}
            for n in args.power:
                share, median = power(played[row["policy"]], played["uniform"], n, args.draws, rng)
                row["power"][n] = {"p_below_0.05": share, "median_p": median}
                print(f"| {layout} | {row['policy']} | {n} | {share:.2f} | {median:.3f} |", flush=True)
    print(json.dumps({"experiment": "menu_policies", "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
