"""Does a training run read its menus? Idle picks per round against what uniform picks would give.

    python -m experiments.lab.idle_picks runs/quickstart                 # any `omjax train` run directory
    python -m experiments.lab.idle_picks RUN --idle wait drop_held
    python -m experiments.lab.idle_picks RUN --parts 3                   # + key weights by thirds of the run

Reads the run's decision records (`decisions/round_XXXX.jsonl`, written by `omjax train`) and,
per round and agent, prints the share of decisions that picked an idle option next to the share
a uniform pick over the same menus would give (the mean over decisions of idle entries / menu
size), and the share of the agent's most used letter. A policy that reads the labels moves the
first away from the second; one that picks by letter keeps them equal whatever its letter habit.

`--parts P` (a run credited by the critic over names, `train.q_label=name`, whose records carry
each entry's key) also splits the rounds into P consecutive parts and prints, per part and
agent, the picks' centred key weight under the run's LAST critic (the final metrics row's
`q_name_weights`: the weight of the picked entry's key less its menu's mean, averaged over the
decisions offering two options or more), what a preference at beta 1 / 2 / 4 over uniform picks
would score on the same menus (`continuation.tilted_weight`), the idle shares, and the part's mean
KL to the base, loss, shaped return and task units from `metrics.jsonl`. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np
from experiments.lab.menu_policies import IDLE

from omjax.train.continuation import tilted_weight
from omjax.train.metrics import read_jsonl

BETAS = (1.0, 2.0, 4.0)


def idle_rows(run_dir: Path, idle: set[str]) -> list[dict]:
    """One row per (round, agent) of the run's decision records."""
    files = sorted((run_dir / "decisions").glob("round_*.jsonl"))
    if not files:
        raise SystemExit(f"no decision records under {run_dir / 'decisions'} (run.save_decisions=false?)")
    rows = []
    for path in files:
        records = read_jsonl(path)
        for agent in sorted({r["agent"] for r in records}):
            mine = [r for r in records if r["agent"] == agent]
            letter, top = collections.Counter(r["letter"] for r in mine).most_common(1)[0]
            rows.append({
                "round": mine[0]["round"], "agent": agent, "decisions": len(mine),
                "idle": sum(r["option"] in idle for r in mine) / len(mine),
                "idle_if_uniform": sum(sum(m["option"] in idle for m in r["menu"]) / len(r["menu"])
                                       for r in mine) / len(mine),
                "top_letter": letter, "top_letter_share": top / len(mine),
            })
    return rows


def key_weight_parts(run_dir: Path, parts: int, idle: set[str]) -> list[dict]:
    """`--parts`: per consecutive part of the run's rounds, its picks' centred key weight per
    agent under the last critic, the beta references, idle shares and mean metrics."""
    metrics = read_jsonl(run_dir / "metrics.jsonl") if (run_dir / "metrics.jsonl").exists() else []
    weights = metrics[-1].get("q_name_weights") if metrics else None
    if not weights:
        raise SystemExit(f"--parts needs a run credited by the critic over names: {run_dir / 'metrics.jsonl'} "
                         "has no q_name_weights")
    files = sorted((run_dir / "decisions").glob("round_*.jsonl"))
    records = [r for path in files for r in read_jsonl(path)]
    if any("keys" not in r for r in records):
        raise SystemExit(f"--parts: the decision records under {run_dir / 'decisions'} carry no entry keys")
    rounds = sorted({r["round"] for r in records})
    out = []
    for chunk in np.array_split(np.array(rounds), parts):
        if not len(chunk):
            continue
        in_part = set(chunk.tolist())
        mine = [r for r in records if r["round"] in in_part]
        agents = sorted({r["agent"] for r in mine})
        picked, refs, idle_share, idle_uniform = [], {b: [] for b in BETAS}, [], []
        for a in agents:
            rs = [r for r in mine if r["agent"] == a]
            scored = [r for r in rs if len(r["menu"]) > 1]
            centred = [np.array([weights[k] for k in r["keys"]]) - np.mean([weights[k] for k in r["keys"]])
                       for r in scored]  # per decision [len(menu)]
            at = [[m["letter"] for m in r["menu"]].index(r["letter"]) for r in scored]
            nan = float("nan")  # an agent with no two-option menu in the part
            picked.append(float(np.mean([w[j] for w, j in zip(centred, at)])) if scored else nan)
            for b in BETAS:
                refs[b].append(float(np.mean([tilted_weight(np.ones(len(w)), w, b) for w in centred]))
                               if scored else nan)
            idle_share.append(sum(r["option"] in idle for r in rs) / len(rs))
            idle_uniform.append(float(np.mean([sum(m["option"] in idle for m in r["menu"]) / len(r["menu"])
                                               for r in rs])))
        rows = [m for m in metrics if m["round"] in in_part]
        mean = lambda key: float(np.mean([m[key] for m in rows if m.get(key) is not None])) if rows else None
        out.append({"rounds": [int(chunk[0]), int(chunk[-1])], "decisions": len(mine), "key_weight": picked,
                    **{f"beta{b:g}": refs[b] for b in BETAS}, "idle": idle_share, "idle_if_uniform": idle_uniform,
                    "kl": mean("kl"), "loss": mean("loss"), "shaped": mean("team_return_mean"),
                    "units": mean("deliveries_mean")})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--idle", nargs="+", default=list(IDLE), help="option names counted as idle")
    parser.add_argument("--parts", type=int, default=0,
                        help="also the picks' key weights under the last critic, by this many parts of the run")
    args = parser.parse_args(argv)
    rows = idle_rows(args.run_dir, set(args.idle))
    print("| round | agent | decisions | idle picked | idle if uniform | most used letter |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['round']} | {r['agent']} | {r['decisions']} | {r['idle']:.2f} | {r['idle_if_uniform']:.2f} | "
              f"{r['top_letter']} {r['top_letter_share']:.2f} |")
    parts = key_weight_parts(args.run_dir, args.parts, set(args.idle)) if args.parts else []
    pair = lambda xs, f="+.3f": " / ".join(f"{x:{f}}" for x in xs)
    for p in parts:
        print(f"rounds {p['rounds'][0]}-{p['rounds'][1]} ({p['decisions']} decisions): picks' key weight "
              f"{pair(p['key_weight'])} (beta 1 / 2 / 4 on the same menus: {pair(p['beta1'])}, {pair(p['beta2'])}, "
              f"{pair(p['beta4'])}); idle {pair(p['idle'], '.2f')} (uniform {pair(p['idle_if_uniform'], '.2f')}); "
              f"kl {p['kl']:.3f}, loss {p['loss']:.3f}, shaped {p['shaped']:.1f}, units {p['units']:.2f}")
    print(json.dumps({"experiment": "idle_picks", "run_dir": str(args.run_dir), "idle": args.idle, "rows": rows,
                      "parts": parts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
