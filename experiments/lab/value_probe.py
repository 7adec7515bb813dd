"""Can the frozen SmolLM2 read an option's value from its prompt? A linear probe (issue 15).

    python -m experiments.lab.value_probe                       # AA, 150 steps, 12 + 4 episodes, Q_u from 32 continuations
    python -m experiments.lab.value_probe --train-episodes 24 --val-episodes 8 --q-rollouts 32
    python -m experiments.lab.value_probe lora.top_layers=4        # features entering the top 4 layers instead

Twelve CPU-scale runs of PA-MAGRPO left the held-out score where the frozen base had it
(docs/results.md). This asks whether the inputs the adapters start
from carry what they would have to learn. The frozen base plays full training-style episodes
(seeds 2000+, never the held-out 10000+) through the shipped decision path (`collect_group`:
the real prompt, the letter-shuffled menu, one forward per decision, the frozen trunk kept);
every decision's menu entries are scored with the trainer's own `train.advantage=uniform_q`
estimator (Q_u of each entry, `omjax.train.continuation`). Each menu entry is described by the
frozen residual stream entering the adapted layers (the setting's `lora.top_layers=8`: the output
of layer 22 of SmolLM2's 30) averaged over the tokens of its menu line `X) label` in the prompt. Ridge regressions
from a description to the entry's advantage A = Q_u - mean over the menu (in units of the
training decisions' sd, centred within each decision, so only what differs between the entries
of one menu counts) are fitted on the first episodes and scored on the last ones:

* `names`: one-hot option name (`pick_onion`, `wait`, ...): the state-free preference a menu
  policy can learn without reading the state (`name_soft` of `menu_policies.py`);
* `instances`: one-hot library instance (option x target);
* `trunk`: the 576-d frozen residual at the entry's menu line (it has read the state text above it);
* `trunk+names`: both;
* `trunk*names`: a separate trunk readout for each option name (plus its one-hot), so the
  value of `pick_onion` can depend on the state in its own way;
* `state*names`: no LLM; each option name's own readout of the true symbolic state (one-hots of
  what the agent and its partner hold, the team's state label and each pot's state and
  onions). It calibrates the others: what a reader of the state could get from these labels.

For each, the validation R^2 of A and the value of the policies they define: the mean true A
(sd units) of the greedy pick and of picks drawn from softmax(beta x predicted A). Uniform
picks score 0 and the per-decision argmax of the true A (the `q_greedy` of `menu_policies.py`,
3.2 soups in 150 steps) bounds them. A learning curve refits on the first n training episodes.
A probe is a readout of fixed features, not a bound on what adapters could compute; it says how
much of the values the base already separates for a linear map to pick up.

Writes `<out>/probe.json` and `<out>/probe.md`; the collected decisions are kept in `<out>/decisions_*.pkl`,
so a second call with the same episodes only refits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import time
from pathlib import Path

import jax
import numpy as np

from experiments.paper.learning import SETTINGS

from omjax.config import load_config
from omjax.jax_cache import enable_compilation_cache
from omjax.options.menu import render_menu
from omjax.options.overcooked import pot_state_code
from omjax.prompts.overcooked import STATES, state_label
from omjax.train import continuation
from omjax.train.rollout import collect_group
from omjax.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]
EPISODE_SEED0 = 2000
"""First episode seed of the probe's episodes (training-style; held-out seeds start at 10000)."""
BETAS = (1.0, 2.0, 4.0)
KINDS = ("names", "instances", "trunk", "trunk+names", "trunk*names", "state*names")
CACHE_VERSION = 2
"""Bumped when a row gains a field: version 2 added `state`."""


def line_spans(tokenizer, prompt_ids: list[int], menu, menu_format: str = "letter_first") -> list[tuple[int, int]]:
    """Token span [lo, hi) of each menu entry's line (`X) label`, or `label -> X` under
    `env.menu_format=letter_last`) in the prompt: the line's own tokens, found as the last run of
    them before the next line's (the menu is the prompt's last)."""
    spans: list[tuple[int, int]] = []
    hi_limit = len(prompt_ids)
    for line in reversed(render_menu(menu, menu_format).split("\n")):
        ids = tokenizer(line, add_special_tokens=False)["input_ids"]
        n = len(ids)
        at = next((lo for lo in range(hi_limit - n, -1, -1) if prompt_ids[lo:lo + n] == ids), None)
        if at is None:
            raise ValueError(f"menu line {line!r} does not tokenize to a run of the prompt's tokens")
        spans.append((at, at + n))
        hi_limit = at
    return spans[::-1]


def symbolic_state(lib, state, agent: int) -> np.ndarray:
    """int [5 + 2 P]: what `agent` and its partner hold, the state label's index, then each of
    the P pots' state code and onions (Overcooked)."""
    pots = pot_state_code(np, lib.layout, np.asarray(state.pot_onions), np.asarray(state.pot_tomatoes),
                          np.asarray(state.pot_tick))
    held = np.asarray(state.held)
    return np.array([held[agent], held[1 - agent], STATES.index(state_label(lib, state, agent)),
                     *pots, *np.asarray(state.pot_onions)], np.int64)


def collect(trainer: Trainer, episodes: list[int], batch: int, key: jax.Array) -> list[dict]:
    """Every decision of the frozen base's full episodes: its entries' trunk features [M, D],
    option names, instance ids and Q_u advantages [M] (raw), its symbolic state and its episode."""
    game, decider, tok = trainer.game, trainer.decider, trainer.model.tokenizer
    bank = trainer.init_state().bank  # B = 0: the frozen base
    rows: list[dict] = []
    for lo in range(0, len(episodes), batch):
        eps = episodes[lo:lo + batch]
        t0 = time.time()
        out = collect_group(game, decider, trainer.params, bank, len(eps), jax.random.fold_in(key, lo)[None],
                            [0], 0, trainer.cfg.n_adapters, progress=sys.stderr.isatty(), episodes=eps, keep_trunk=True,
                            snapshots=True)[0]
        ds = out.decisions
        q, shown = trainer.credit.q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds],
                                             jax.random.fold_in(key, 1_000_000 + lo))
        v = continuation.baseline(q, shown)
        for j, d in enumerate(ds):
            if len(d.menu) < 2:
                continue
            spans = line_spans(tok, list(d.prompt_ids), d.menu, trainer.cfg.env.menu_format)
            if d.trunk is None or len(d.trunk) < len(d.prompt_ids):
                raise RuntimeError("the rollout kept no trunk for the whole prompt")
            feats = np.stack([d.trunk[a:b].mean(axis=0) for a, b in spans])  # [M, D]
            rows.append(dict(episode=eps[d.rollout], agent=d.agent, feats=feats.astype(np.float32),
                             names=[it.opt for it in d.menu], inst=[it.index for it in d.menu],
                             adv=np.array([q[j, it.index] - v[j] for it in d.menu]),
                             state=symbolic_state(game.lib, d.snapshot[0], d.agent)))
        print(f"episodes {eps}: {len(ds)} decisions, deliveries {out.units.tolist()}, "
              f"{time.time() - t0:.0f} s", flush=True)
    return rows


def state_hot(rows: list[dict]) -> list[np.ndarray]:
    """One-hot [S] of each row's symbolic state, column by column over the values seen in `rows`."""
    cols = np.stack([r["state"] for r in rows])  # [N, C]
    levels = [np.unique(c) for c in cols.T]
    return [np.concatenate([(lv == v).astype(np.float64) for lv, v in zip(levels, row)]) for row in cols]


def per_name(hot: np.ndarray, f: np.ndarray) -> np.ndarray:
    """[M, names x F]: each entry's features [M, F] in the block of its option name (hot [M, names])."""
    return (hot[:, :, None] * f[:, None, :]).reshape(len(hot), -1)


def design(rows: list[dict], kind: str, names: list[str], n_inst: int,
           hots: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X [N, F] centred within each decision, y [N] the same, decision id [N]) over all entries;
    `hots`: each row's `state_hot`, for `state*names`."""
    xs, ys, gid = [], [], []
    for g, r in enumerate(rows):
        hot = np.eye(len(names))[[names.index(n) for n in r["names"]]]  # [M, names]
        feats = r["feats"].astype(np.float64)  # [M, D]
        if kind == "names":
            parts = [hot]
        elif kind == "instances":
            parts = [np.eye(n_inst)[r["inst"]]]
        elif kind == "trunk":
            parts = [feats]
        elif kind == "trunk+names":
            parts = [feats, hot]
        elif kind == "trunk*names":  # one trunk readout per option name
            parts = [per_name(hot, feats), hot]
        elif kind == "state*names":  # one readout of the symbolic state per option name
            parts = [per_name(hot, np.broadcast_to(hots[g], (len(hot), len(hots[g])))), hot]
        else:
            raise ValueError(f"unknown probe {kind!r}; one of {KINDS}")
        x = np.concatenate(parts, axis=1)
        xs.append(x - x.mean(axis=0))
        ys.append(r["adv"] - r["adv"].mean())
        gid.append(np.full(len(x), g))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(gid)


def r2(y: np.ndarray, pred: np.ndarray) -> float:
    """1 - SSE / SS of y (y is centred within decisions); nan where y carries no variance."""
    ss = float(np.sum(y ** 2))
    return float(1 - np.sum((y - pred) ** 2) / ss) if ss > 0 else float("nan")


def ridge(gram: np.ndarray, xty: np.ndarray, lam: float) -> np.ndarray:
    """Ridge weights [F] from X^T X [F, F] and X^T y [F]."""
    return np.linalg.solve(gram + lam * np.eye(len(gram)), xty)


def choose_lambda(x, y, gid, grid=(1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4)) -> float:
    """The ridge weight with the best 4-fold (by decision) held-out R^2 within the training set."""
    folds = gid % 4
    if not np.any(y):
        return grid[0]
    # Each fold's Gram matrix once, for every weight of the grid.
    parts = [(x[folds != f].T @ x[folds != f], x[folds != f].T @ y[folds != f], x[folds == f], y[folds == f])
             for f in range(4)]
    sse = [sum(np.sum((yf - xf @ ridge(gram, xty, lam)) ** 2) for gram, xty, xf, yf in parts) for lam in grid]
    return grid[int(np.argmin(sse))]


def policy_values(pred: np.ndarray, y: np.ndarray, gid: np.ndarray, sd: float) -> dict:
    """Mean true advantage (sd units) of the greedy pick and of softmax(beta x pred / sd) picks."""
    out = {"greedy": [], **{f"soft_b{b:g}": [] for b in BETAS}, "oracle": []}
    for g in np.unique(gid):
        m = gid == g
        p, a = pred[m] / sd, y[m] / sd
        out["greedy"].append(a[np.flatnonzero(p == p.max())].mean())
        out["oracle"].append(a.max())
        for b in BETAS:
            w = np.exp(b * (p - p.max()))
            out[f"soft_b{b:g}"].append(float((w / w.sum()) @ a))
    return {k: float(np.mean(v)) for k, v in out.items()}


def evaluate(train: list[dict], val: list[dict], kind: str, names: list[str], n_inst: int, sd: float) -> dict:
    hots = state_hot(train + val) if kind == "state*names" else None  # one encoding for both sets
    x, y, gid = design(train, kind, names, n_inst, hots and hots[:len(train)])
    xv, yv, gv = design(val, kind, names, n_inst, hots and hots[len(train):])
    scale = x.std(axis=0) + 1e-8  # features on one scale, so one ridge weight fits all
    x, xv = x / scale, xv / scale
    lam = choose_lambda(x, y, gid)
    w = ridge(x.T @ x, x.T @ y, lam)
    pred_tr, pred = x @ w, xv @ w
    return {"kind": kind, "lambda": lam, "decisions_train": len(train),
            "r2_train": r2(y, pred_tr), "r2_val": r2(yv, pred),
            **policy_values(pred, yv, gv, sd)}


def name_table(rows: list[dict], sd: float) -> list[dict]:
    """Each option name's mean advantage (sd units) over every entry that showed it."""
    by: dict[str, list[float]] = {}
    for r in rows:
        for n, a in zip(r["names"], r["adv"]):
            by.setdefault(n, []).append(a / sd)
    return sorted(({"name": n, "mean_adv": float(np.mean(v)), "entries": len(v)} for n, v in by.items()),
                  key=lambda e: -e["mean_adv"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-episodes", type=int, default=12)
    parser.add_argument("--val-episodes", type=int, default=4)
    parser.add_argument("--batch", type=int, default=4, help="episodes played together")
    parser.add_argument("--q-rollouts", type=int, default=32)
    parser.add_argument("--out", default=str(REPO / "runs" / "value_probe"))
    parser.add_argument("overrides", nargs="*", help="config key=value pairs, applied after the setting's")
    args = parser.parse_args(argv)
    enable_compilation_cache()
    setting = SETTINGS["overcooked_q_last_burn"]
    cfg = load_config(REPO / "configs" / setting.config,
                      [*setting.overrides, f"train.credit.rollouts={args.q_rollouts}", "train.credit.burnin=0", "run.progress=false",
                       *args.overrides])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    trainer = Trainer(cfg, run_dir=out / "run")
    n_eps = args.train_episodes + args.val_episodes
    episodes = list(range(EPISODE_SEED0, EPISODE_SEED0 + n_eps))
    tag = hashlib.sha1(" ".join(args.overrides).encode()).hexdigest()[:8] if args.overrides else "default"
    cache = out / f"decisions_v{CACHE_VERSION}_{EPISODE_SEED0}_{n_eps}_q{args.q_rollouts}_{tag}.pkl"
    if cache.exists():  # the collected decisions of an earlier call with these episodes: refit only
        rows, t_collect = pickle.loads(cache.read_bytes())
    else:
        rows = collect(trainer, episodes, args.batch, jax.random.PRNGKey(0))
        t_collect = time.time() - t0
        tmp = cache.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps((rows, t_collect)))
        tmp.replace(cache)
    cut = EPISODE_SEED0 + args.train_episodes
    train = [r for r in rows if r["episode"] < cut]
    val = [r for r in rows if r["episode"] >= cut]
    names = sorted({n for r in rows for n in r["names"]})
    n_inst = 1 + max(i for r in rows for i in r["inst"])
    sd = float(np.std(np.concatenate([r["adv"] for r in train])))  # the trainer's scale: sd of the raw advantages
    results = [evaluate(train, val, kind, names, n_inst, sd) for kind in KINDS]
    curve = []
    for n in sorted({args.train_episodes // 4, args.train_episodes // 2, args.train_episodes} - {0}):
        part = [r for r in train if r["episode"] < EPISODE_SEED0 + n]
        for kind in ("names", "trunk+names", "state*names"):
            curve.append({"train_episodes": n, **evaluate(part, val, kind, names, n_inst, sd)})
    summary = {"experiment": "value_probe", "layout": cfg.env.layout, "horizon": cfg.env.horizon,
               "q_horizon": cfg.train.credit.horizon, "q_rollouts": cfg.train.credit.rollouts,
               "trunk_layer": trainer.policy.frozen_layers, "train_episodes": args.train_episodes,
               "val_episodes": args.val_episodes, "decisions_train": len(train), "decisions_val": len(val),
               "adv_sd": sd, "collect_s": t_collect, "results": results, "curve": curve,
               "names": name_table(rows, sd)}
    (out / "probe.json").write_text(json.dumps(summary, indent=1))
    cols = ["kind", "decisions_train", "lambda", "r2_train", "r2_val", "greedy", *[f"soft_b{b:g}" for b in BETAS],
            "oracle"]
    fmt = lambda r: "| " + " | ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |"
    extra = "".join(f" {o}" for o in args.overrides)
    lines = [f"# Linear probe of Q_u advantages from frozen {cfg.model.name} features ({cfg.env.layout}, "
             f"{cfg.env.horizon} steps, layer {trainer.policy.frozen_layers})",
             "", f"`python -m experiments.lab.value_probe --train-episodes {args.train_episodes} --val-episodes "
             f"{args.val_episodes} --q-rollouts {args.q_rollouts}{extra}` ({len(train)} training / {len(val)} validation "
             f"decisions with 2+ entries, episode seeds {EPISODE_SEED0}-{EPISODE_SEED0 + n_eps - 1}; "
             f"collection {t_collect / 60:.1f} min; advantage sd {sd:.3f})", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols), *map(fmt, results), "",
             "Learning curve (the first n training episodes):", "",
             "| train_episodes | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1),
             *[f"| {r['train_episodes']} " + fmt(r) for r in curve], "",
             "Each option name's mean advantage over all decisions (sd units):", "",
             "| name | mean advantage | entries |", "|---|---|---|",
             *[f"| {e['name']} | {e['mean_adv']:+.2f} | {e['entries']} |" for e in summary["names"]], "",
             json.dumps(summary)]
    (out / "probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:-1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
