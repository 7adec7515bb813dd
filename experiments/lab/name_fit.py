"""Can the adapters learn a name preference from real Overcooked prompts at all? The update, fitted.

    python -m experiments.lab.name_fit --weights-from runs/learning/overcooked_q_last_burn/per_agent
    python -m experiments.lab.name_fit --weights-from RUN --train-rounds 8 --heldout-rounds 2 --fits 12
    python -m experiments.lab.name_fit --weights-from RUN --cache runs/nf.pkl train.objective=target
    python -m experiments.lab.name_fit --weights-from RUN --train-rounds 4 --heldout-from 8 --fits 2  # vs 8 rounds, 1 fit

The `overcooked_q_name` setting (`configs/lab/overcooked_q_name.yaml`) credited every menu
entry with a critic over option names and its adapters learned nothing in 1,450 decisions. This
separates what the credit's round-to-round noise could explain from what the prompt and the
adapter can learn: it collects the frozen base's decisions of `--train-rounds` rounds of that
setting (30-step segments of 150-step episodes, training-style seeds and rounds), credits every
entry with fixed name weights (the mean of a run's per-round `q_name_weights`: training data,
centred over each menu), and applies the setting's update (`Trainer.update`: the all-options
surrogate, 2 epochs, KL to the base, each agent's own adapter) to those same decisions `--fits`
times, each from the adapter the last one left (a fresh pi_old, as a new round would). After each
fit it scores every decision of `--heldout-rounds` later rounds (never fitted on) and the fitted
ones, and prints each agent's expected centred weight under its policy: 0 for uniform picks over
the menu, what `name_soft` at beta 1 and 2 (`experiments/lab/menu_policies.py`) would give on the
same menus, what the target objective's optimum pi_ref x exp(beta w~) at beta 2 and 4 (kl_coef
0.5 and 0.25) gives with the base as pi_ref, and the base's own. Ends with one JSON line; `--out`
also writes it as jsonl.
`--adapters-from RUN --fits 0` scores a training run's latest adapters on the same base
decisions instead: what that run taught, on states it may never have visited. `--cache` keeps
the collected decisions (their collection is most of a short run's time).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from experiments.paper import common
from experiments.paper.learning import SETTINGS

from omjax.config import load_config
from omjax.train.checkpoint import Checkpointer
from omjax.train.continuation import tilted_weight
from omjax.train.metrics import read_jsonl
from omjax.train.rollout import collect_group, update_inputs
from omjax.train.trainer import Trainer
from omjax.train.update import active_minibatches


def mean_weights(run_dir: Path) -> dict[str, float]:
    """Mean over a run's rounds of its name critic's weights (`q_name_weights` rows)."""
    by: dict[str, list[float]] = {}
    for row in read_jsonl(run_dir / "metrics.jsonl"):
        for name, w in (row.get("q_name_weights") or {}).items():
            by.setdefault(name, []).append(w)
    if not by:
        raise SystemExit(f"{run_dir / 'metrics.jsonl'} has no q_name_weights (a train.q_label=name run)")
    return {name: float(np.mean(v)) for name, v in sorted(by.items())}


def centred(menu, weights: dict[str, float]) -> np.ndarray:
    """[len(menu)] each entry's name weight less the menu's mean (0 for a name without one)."""
    w = np.array([weights.get(it.opt, 0.0) for it in menu])
    return w - w.mean()


def collect(trainer: Trainer, bank, rounds: range, weights: dict[str, float]) -> list:
    """The decisions `bank` takes in the given rounds of the run's schedule, each crediting
    every menu entry with its centred name weight. They keep no frozen trunk (`prepared` adds
    it once per set), so a cache of them serves any `lora.*` layout."""
    cfg, out = trainer.cfg, []
    for r in rounds:
        key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), r)
        batch = collect_group(trainer.game, trainer.decider, trainer.params, trainer.placement.bank(bank),
                              cfg.train.rollouts, key[None],
                              trainer.seeds, r, cfg.n_adapters, progress=False, keep_trunk=False,
                              **trainer._segments(r))[0]
        for d in batch.decisions:
            d.option_advantages = centred(d.menu, weights).astype(np.float32)
            d.advantage = float(d.option_advantages[d.action])
        out += batch.decisions
    return out


def prepared(trainer: Trainer, inputs: dict) -> dict:
    """[A, B, ...] update rows with the update's once-per-round frozen work done once
    (`policy.prepare`: the trunk and, under `lora.scope=reply`, the prompt's cache); the update
    and the scoring skip it on rows that carry it, so each fit runs only the adapted layers."""
    mb, prep = trainer.cfg.train.minibatch_size, jax.jit(trainer.policy.prepare)
    n_agents, b = jax.tree.leaves(inputs)[0].shape[:2]
    per_agent = []
    for a in range(n_agents):
        chunks = [prep(trainer.params, jax.tree.map(lambda v: jnp.asarray(v[a, lo:lo + mb]), inputs))
                  for lo in range(0, b, mb)]  # one compiled shape: b is a multiple of mb
        per_agent.append(jax.tree.map(lambda *xs: np.concatenate([np.asarray(x) for x in xs]), *chunks))
    return jax.tree.map(lambda *xs: np.stack(xs), *per_agent)


def slot_probabilities(trainer: Trainer):
    """Jitted `(lora, inputs) -> [B, M]`: one adapter's probability of each menu slot (state
    labels summed out) on a chunk of `update_inputs` rows."""
    policy, base = trainer.policy, trainer.params
    return jax.jit(lambda lora, x: jnp.exp(jax.nn.logsumexp(policy.joint_logp(base, lora, policy.prepare(base, x)),
                                                            axis=1)))


def scoring_rows(trainer: Trainer, decisions: list) -> tuple[dict, list[list[np.ndarray]]]:
    """Padded once for every scoring of `decisions`: their `update_inputs` rows [A, B, ...] and,
    per agent, each decision's centred name weights (`Decision.option_advantages`, from `collect`)."""
    cfg = trainer.cfg
    batch = update_inputs(decisions, trainer.policy, trainer.decider, None, cfg.n_adapters, lambda d: d.agent,
                          cfg.train.minibatch_size)
    return (prepared(trainer, batch.inputs),
            [[d.option_advantages for d in decisions if d.agent == a] for a in range(cfg.n_adapters)])


def menu_probabilities(trainer: Trainer, score, bank, rows: tuple[dict, list[list[np.ndarray]]]) -> list[np.ndarray]:
    """Per agent [n, M]: its adapter's distribution over each of its decisions' menu slots
    (`score`, from `slot_probabilities`; `rows` from `scoring_rows`)."""
    inputs, centred_of = rows
    mb, out = trainer.cfg.train.minibatch_size, []
    for a, mine in enumerate(centred_of):
        lora = jax.tree.map(lambda v: v[a], bank)
        out.append(np.concatenate([np.asarray(score(lora, jax.tree.map(lambda v: v[a, lo:lo + mb], inputs)))
                                   for lo in range(0, len(mine), mb)]))
    return out


def expected_weight(probs: list[np.ndarray], centred_of: list[list[np.ndarray]]) -> list[float]:
    """Per agent: the mean over its decisions of sum_j pi(j) w~_j, pi its adapter's distribution
    over the menu's slots (`probs` [n, M] from `menu_probabilities`)."""
    return [float(np.mean([p[j, :len(w)] @ w for j, w in enumerate(mine)])) for p, mine in zip(probs, centred_of)]


def target_weight(probs: list[np.ndarray], centred_of: list[list[np.ndarray]], beta: float) -> list[float]:
    """Per agent: the expected centred weight under the regularised optimum the target objective
    fits (`train.objective=target` at kl_coef 1 / beta), pi_ref(j) exp(beta w~_j) normalised over
    each menu, pi_ref the base's menu distribution `probs` [n, M] (`menu_probabilities` of fresh
    adapters). `name_soft` is the same with a uniform pi_ref: a base that favours some letters
    whatever they label keeps that habit in its optimum, which then sits nearer 0."""
    return [float(np.mean([tilted_weight(p[j, :len(w)], w, beta) for j, w in enumerate(mine)]))
            for p, mine in zip(probs, centred_of)]


def name_soft(decisions: list, beta: float) -> list[float]:
    """Per agent: the expected centred weight of `name_soft` at `beta` on the same menus (each
    decision's centred weights w~ from `collect`; exp(beta w~) is exp(beta w) normalised)."""
    return [float(np.mean([tilted_weight(np.ones(len(d.option_advantages)), d.option_advantages, beta)
                           for d in decisions if d.agent == a]))
            for a in sorted({d.agent for d in decisions})]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weights-from", type=Path, required=True,
                        help="a train.q_label=name run directory: its mean per-round q_name_weights")
    parser.add_argument("--game", default="overcooked_q_last_burn", choices=sorted(SETTINGS))
    parser.add_argument("--train-rounds", type=int, default=8, help="rounds of decisions fitted on")
    parser.add_argument("--heldout-rounds", type=int, default=2, help="later rounds of decisions scored only")
    parser.add_argument("--heldout-from", type=int, default=None,
                        help="first held-out round (default: --train-rounds), so that runs fitting different "
                             "numbers of rounds can be scored on the same held-out decisions")
    parser.add_argument("--fits", type=int, default=12, help="updates applied to the fitted decisions")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows as jsonl here")
    parser.add_argument("--adapters-from", type=Path, default=None,
                        help="a training run directory of the same setting: score (and fit on from) its latest "
                             "checkpoint's adapters instead of fresh ones; with --fits 0, only score them")
    parser.add_argument("--cache", type=Path, default=None,
                        help="pickle of the collected decisions: read if it exists (collected with the same "
                             "weights, rounds and learning setting), else written after collecting")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides applied last")
    args = parser.parse_args(argv)
    if min(args.train_rounds, args.heldout_rounds) < 1 or args.fits < (0 if args.adapters_from else 1):
        raise SystemExit("--train-rounds, --heldout-rounds and --fits must be >= 1 (--fits 0 only with "
                         "--adapters-from)")
    heldout_from = args.train_rounds if args.heldout_from is None else args.heldout_from
    if heldout_from < args.train_rounds:
        raise SystemExit(f"--heldout-from {heldout_from} would score rounds fitted on (0..{args.train_rounds - 1})")
    weights = mean_weights(args.weights_from)
    setting = SETTINGS[args.game]
    cfg = load_config(common.CONFIGS / setting.config, [*setting.overrides, "run.progress=false", *args.overrides])
    trainer = Trainer(cfg, model=None)
    state = trainer.init_state()
    bank, opt_state = state.bank, state.opt_state
    if args.adapters_from is not None:  # decisions are still collected by the base (fresh `bank`)
        ckpt = Checkpointer(args.adapters_from)
        if ckpt.latest_round() is None:
            raise SystemExit(f"{args.adapters_from} holds no checkpoint")
        restored = ckpt.restore(state)
        print(f"adapters of {args.adapters_from}, checkpoint of round {restored.step}", flush=True)
    t0 = time.time()
    key = {"game": args.game, "weights": weights, "train_rounds": args.train_rounds,
           "heldout_rounds": args.heldout_rounds,
           **({"heldout_from": heldout_from} if heldout_from != args.train_rounds else {}),  # older caches stay valid
           "seed": cfg.seed, "env": repr(cfg.env), "policy": repr(cfg.policy)}
    if args.cache is not None and args.cache.exists():
        cached = pickle.loads(args.cache.read_bytes())
        if cached["key"] != key:
            raise SystemExit(f"--cache {args.cache} was collected for {cached['key']}, not {key}")
        fit, held = cached["fit"], cached["held"]
    else:
        fit = collect(trainer, bank, range(args.train_rounds), weights)
        held = collect(trainer, bank, range(heldout_from, heldout_from + args.heldout_rounds), weights)
        if args.cache is not None:
            args.cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = args.cache.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps({"key": key, "fit": fit, "held": held}))
            tmp.replace(args.cache)  # a killed write leaves no half pickle under the cache's name
    print(f"weights {json.dumps({k: round(v, 2) for k, v in weights.items()})}; {len(fit)} decisions fitted, "
          f"{len(held)} held out, collected in {time.time() - t0:.0f} s", flush=True)
    reference = {f"name_soft@{b:g}": name_soft(held, b) for b in (1.0, 2.0)}
    print(f"held-out reference: {json.dumps({k: [round(x, 3) for x in v] for k, v in reference.items()})}")
    t = cfg.train
    if args.fits:
        dbatch = update_inputs(fit, trainer.policy, trainer.decider, None, cfg.n_adapters, lambda d: d.agent,
                               t.minibatch_size, t.update_rows, t.update_tokens)
        active = active_minibatches(dbatch.valid, t.minibatch_size)
        dbatch = trainer.placement.split(dbatch.replace(inputs=prepared(trainer, dbatch.inputs)))
    if args.adapters_from is not None:
        bank, opt_state = restored.state.bank, restored.state.opt_state
    rows, score = [], slot_probabilities(trainer)
    scored = {"heldout": scoring_rows(trainer, held), "fitted": scoring_rows(trainer, fit)}
    base_probs = menu_probabilities(trainer, score, state.bank, scored["heldout"])  # fresh adapters: the base
    reference.update({f"target@{b:g}": target_weight(base_probs, scored["heldout"][1], b) for b in (2.0, 4.0)})
    print(f"held-out optimum of the target objective: "
          f"{json.dumps({k: [round(x, 3) for x in v] for k, v in reference.items() if k.startswith('target')})}",
          flush=True)
    for i in range(args.fits + 1):
        if i:
            keys = trainer.placement.split(jax.random.split(jax.random.PRNGKey(1000 + i), cfg.n_adapters))
            bank, opt_state, metrics = trainer.update(trainer.params, trainer.placement.bank(bank),
                                                      trainer.placement.bank(opt_state), dbatch, keys, active)
        # Before any fit, fresh adapters are the base, whose held-out scores `base_probs` holds.
        probs = {k: base_probs if (k, i, args.adapters_from) == ("heldout", 0, None)
                 else menu_probabilities(trainer, score, bank, v) for k, v in scored.items()}
        row = {"fit": i, **{k: expected_weight(probs[k], v[1]) for k, v in scored.items()},
               "time_s": round(time.time() - t0, 1)}
        if i:
            row["kl"] = float(np.mean(np.asarray(metrics.kl)[np.asarray(metrics.stepped)]))
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"experiment": "name_fit", "game": args.game, "weights": weights, "fitted_decisions": len(fit),
              "heldout_decisions": len(held), "reference": reference, "rows": rows}
    if args.out is not None:
        common.write_text(args.out, "".join(json.dumps(r) + "\n" for r in rows))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
