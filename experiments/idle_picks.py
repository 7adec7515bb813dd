"""Does a training run read its menus? Idle picks per round against what uniform picks would give.

    python experiments/idle_picks.py runs/quickstart                 # any `omjax train` run directory
    python experiments/idle_picks.py RUN --idle wait drop_held

Reads the run's decision records (`decisions/round_XXXX.jsonl`, written by `omjax train`) and,
per round and agent, prints the share of decisions that picked an idle option next to the share
a uniform pick over the same menus would give (the mean over decisions of idle entries / menu
size), and the share of the agent's most used letter. A policy that reads the labels moves the
first away from the second; one that picks by letter keeps them equal whatever its letter habit.
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from menu_policies import IDLE  # noqa: E402

from omjax.train.metrics import read_jsonl  # noqa: E402


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--idle", nargs="+", default=list(IDLE), help="option names counted as idle")
    args = parser.parse_args(argv)
    rows = idle_rows(args.run_dir, set(args.idle))
    print("| round | agent | decisions | idle picked | idle if uniform | most used letter |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['round']} | {r['agent']} | {r['decisions']} | {r['idle']:.2f} | {r['idle_if_uniform']:.2f} | "
              f"{r['top_letter']} {r['top_letter_share']:.2f} |")
    print(json.dumps({"experiment": "idle_picks", "run_dir": str(args.run_dir), "idle": args.idle, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
