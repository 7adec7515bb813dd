"""How often does each picked option achieve its effect? Per option, the share of executions that
ended in SUCCESS (its delta-form effect predicate held), EFFECT_FAIL (ran to termination without
the effect) or a typed executor failure, for the frozen base and a trained run's adapters, and
how many of the soups handed in scored (only 3-onion soups do on the classic layouts).

    python -m experiments.lab.option_outcomes --game overcooked_q_last_burn \\
        --adapters-from runs/learning/overcooked_q_last_burn/per_agent --seeds 0 8

Plays `learning.py`'s setting (its held-out episode configuration) on training-style seeds
(`--seeds FIRST N`, default 0..7: never the held-out 10000+), records each option execution's
outcome through the game's `_ended` hook and pairs it, in order, with the decision that started
it (an execution still running at the horizon has none). Prints a markdown table per policy and
one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import jax
import numpy as np

from experiments.paper import common
from experiments.paper.learning import EVAL_SEED0, SETTINGS

from omjax.config import load_config
from omjax.options.schema import EFFECT_FAIL, SUCCESS
from omjax.train.checkpoint import Checkpointer
from omjax.train.rollout import collect
from omjax.train.trainer import Trainer


def outcomes(trainer: Trainer, bank, seeds: list[int]) -> tuple[dict[str, collections.Counter], float]:
    """({option name: Counter(success / effect_fail / executor_fail / running)}, the real
    deliveries: soups that scored, which on the classic layouts are 3-onion ones only) over the
    episodes. A `deliver` success is any soup handed in, scoring or not."""
    game = trainer.game
    ended: dict[tuple[int, int], list[int]] = collections.defaultdict(list)

    def record(valid: np.ndarray, outcome: np.ndarray) -> None:  # [K, A] each
        for k, a in np.argwhere(valid):
            ended[(int(k), int(a))].append(int(outcome[k, a]))

    game._ended = record  # the instance's hook for this call only
    try:
        batch = collect(game, trainer.decider, trainer.model.params, bank, len(seeds),
                        jax.random.PRNGKey(seeds[0]), seeds[0], 0, episodes=seeds)
    finally:
        del game._ended
    per: dict[tuple[int, int], list[str]] = collections.defaultdict(list)
    for d in sorted(batch.decisions, key=lambda d: d.step):
        per[(d.rollout, d.agent)].append(d.menu[d.action].opt)
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for key, opts in per.items():
        codes = ended.get(key, [])
        if len(codes) > len(opts):
            raise RuntimeError(f"rollout/agent {key}: {len(codes)} executions ended but {len(opts)} were started")
        for j, opt in enumerate(opts):
            c = codes[j] if j < len(codes) else None
            out[opt]["running" if c is None else "success" if c == SUCCESS else
                     "effect_fail" if c == EFFECT_FAIL else "executor_fail"] += 1
    return out, float(game.agent_returns().sum())


def table(name: str, counts: dict[str, collections.Counter]) -> str:
    lines = [f"### {name}", "", "| option | picked | success | effect fail | executor fail | running at the end |",
             "|---|---|---|---|---|---|"]
    for opt in sorted(counts, key=lambda o: -sum(counts[o].values())):
        c = counts[opt]
        n = sum(c.values())
        lines.append(f"| {opt} | {n} | {c['success'] / n:.2f} | {c['effect_fail'] / n:.2f} | "
                     f"{c['executor_fail'] / n:.2f} | {c['running'] / n:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="overcooked_q_last_burn", choices=sorted(SETTINGS))
    parser.add_argument("--adapters-from", type=Path, required=True, help="a learning.py run directory (per_agent)")
    parser.add_argument("--seeds", type=int, nargs=2, default=[0, 8], metavar=("FIRST", "N"))
    args = parser.parse_args(argv)
    first, n = args.seeds
    if first + n > EVAL_SEED0:
        raise SystemExit(f"--seeds must stay below the held-out seeds ({EVAL_SEED0}+), got {first}..{first + n - 1}")
    setting = SETTINGS[args.game]
    cfg = load_config(common.CONFIGS / setting.config, [*setting.overrides, *setting.eval_overrides,
                                                        "run.out_dir=/tmp/option_outcomes"])
    trainer = Trainer(cfg)
    ckpt = Checkpointer(args.adapters_from)
    if ckpt.latest_round() is None:
        raise SystemExit(f"{args.adapters_from / 'checkpoints'} holds no finished checkpoint")
    trained = ckpt.restore(trainer.init_state()).state.bank
    ckpt.close()
    seeds = list(range(first, first + n))
    result = {}
    for name, bank in (("frozen", trainer.init_state().bank), ("trained", trained)):
        counts, scored = outcomes(trainer, bank, seeds)
        result[name] = {"outcomes": {o: dict(c) for o, c in counts.items()}, "deliveries": scored}
        print(table(name, counts))
        handed = counts.get("deliver", collections.Counter())["success"]
        print(f"\nsoups handed in (`deliver` successes): {handed}; real deliveries (scoring soups): {scored:g}\n",
              flush=True)
    print(json.dumps({"game": args.game, "seeds": seeds, "adapters_from": str(args.adapters_from), "policies": result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
