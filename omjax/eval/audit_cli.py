"""`omjax audit <kind> ...`: behavioural audits as PNGs (paper Figs. 1-3).

    omjax audit macro    --eval runs/x/eval [--out fig1.png]          # Fig. 1 from eval.jsonl
    omjax audit patches  --eval frozen=runs/f/eval tuned=runs/t/eval  # Fig. 2 from trajectories
    omjax audit heatmap  --eval runs/x/eval [--out fig3.png]          # Fig. 3 from trajectories
    omjax audit solo     --policies cook idle --out solo.png           # §6.4 solo test + FC control
    omjax audit solo     --checkpoint runs/x --seeds 10000-10004 --out solo.png   # trained agents

`macro`, `patches` and `heatmap` read what `omjax eval` wrote (`eval.jsonl` and
`trajectories/seed*.npz`), so an audit never re-runs a policy. `solo` plays Overcooked once with
the whole team and once per agent alone: scripted option policies (`omjax.eval.scripted`) on each
`--layouts` entry, or, with `--checkpoint`, a trained run on its own layout and held-out seeds. Each audit also writes a JSON summary next to its PNG.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from omjax.config import load_config
from omjax.eval.audits import (
    macro_counts,
    patch_survival,
    plot_macro_histogram,
    plot_patch_survival,
    plot_solo_test,
    plot_visit_heatmaps,
    visit_counts,
)
from omjax.eval.cli import load_policy, parse_seeds
from omjax.eval.option_rollout import solo_test_overcooked
from omjax.eval.results import Trajectory, read_results
from omjax.eval.scripted import POLICIES
from omjax.eval.solo import solo_test_policy


def _eval_dir(path: str) -> Path:
    p = Path(path)
    if p.is_file() and p.name == "eval.jsonl":
        p = p.parent
    if not (p / "eval.jsonl").is_file():
        raise SystemExit(f"omjax audit: {p} holds no eval.jsonl (run `omjax eval` first)")
    return p


def _trajectories(eval_dir: Path) -> list[Trajectory]:
    files = sorted((eval_dir / "trajectories").glob("seed*.npz"))
    if not files:
        raise SystemExit(f"omjax audit: {eval_dir}/trajectories holds no seed*.npz trajectory files")
    return [Trajectory.load(f) for f in files]


def _labelled(items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep:
            label, path = Path(item).resolve().parent.name, item
        out[label] = _eval_dir(path)
    return out


def audit_macro(eval_dir: Path, out: Path) -> dict:
    """Fig. 1: per-agent macro-choice shares, summed over the evaluation episodes."""
    results = read_results(eval_dir / "eval.jsonl")
    n_agents = results[0].n_agents
    decisions = (
        {"aid": a, "opt": opt}
        for r in results
        for a, counts in enumerate(r.macro_counts)
        for opt, k in counts.items()
        for _ in range(k)
    )
    counts, names = macro_counts(decisions, n_agents)
    if not names:
        raise SystemExit(f"omjax audit macro: {eval_dir} has no macro decisions (a native-action policy?)")
    title = f"Per-agent macro choices: {results[0].policy} ({results[0].game} / {results[0].layout})"
    plot_macro_histogram(counts, names, out, title=title)
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    return {"options": names, "counts": counts.tolist(), "shares": np.round(shares, 4).tolist()}


def audit_patches(evals: dict[str, Path], out: Path, n_patches: int | None) -> dict:
    """Fig. 2: patches alive per step, one curve per evaluated policy."""
    curves = {}
    summary = {}
    for label, eval_dir in evals.items():
        series = [t.patches_alive for t in _trajectories(eval_dir)]
        if any(s is None for s in series):
            raise SystemExit(f"omjax audit patches: {eval_dir} trajectories carry no patches_alive (not Harvest?)")
        length = min(len(s) for s in series)
        alive = np.stack([s[:length] for s in series])  # [E, T]
        curves[label] = alive
        curve = patch_survival(alive)
        summary[label] = {
            "final_mean_alive": float(curve.mean[-1]),
            "depletion_step": curve.depletion_step.tolist(),
        }
    plot_patch_survival(curves, out, n_patches=n_patches)
    return summary


def audit_heatmap(eval_dir: Path, out: Path) -> dict:
    """Fig. 3: per-agent visit counts over every evaluation episode."""
    trajectories = _trajectories(eval_dir)
    walls = trajectories[0].walls
    counts = sum(visit_counts(t.positions, walls.shape) for t in trajectories)  # [A, H, W]
    plot_visit_heatmaps(counts, out, walls=walls)
    occupied = counts.reshape(counts.shape[0], -1)
    return {
        "visits": occupied.sum(axis=1).tolist(),
        "distinct_cells": (occupied > 0).sum(axis=1).tolist(),
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omjax audit", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="kind", required=True)
    macro = sub.add_parser("macro", help="Fig. 1: per-agent macro-choice histogram")
    macro.add_argument("--eval", required=True, help="eval directory (or its eval.jsonl)")
    macro.add_argument("--out", default=None, help="PNG path (default: <eval>/audit_macro.png)")
    patches = sub.add_parser("patches", help="Fig. 2: Harvest patch survival, one curve per policy")
    patches.add_argument("--eval", nargs="+", required=True, help="LABEL=eval_dir per policy")
    patches.add_argument("--out", required=True, help="PNG path")
    patches.add_argument("--n-patches", type=int, default=6, help="y-axis ceiling (paper: 6 patches)")
    heatmap = sub.add_parser("heatmap", help="Fig. 3: per-agent visit heatmaps")
    heatmap.add_argument("--eval", required=True, help="eval directory (or its eval.jsonl)")
    heatmap.add_argument("--out", default=None, help="PNG path (default: <eval>/audit_heatmap.png)")
    solo = sub.add_parser("solo", help="§6.4 solo test on Overcooked layouts (scripted option policies)")
    solo.add_argument("--layouts", nargs="+", default=["asymmetric_advantages", "forced_coordination"])
    solo.add_argument("--policies", nargs="+", default=["cook", "cook"],
                      help=f"one scripted policy per agent, from: {', '.join(POLICIES)}")
    solo.add_argument("--horizon", type=int, default=400, help="env steps per episode (paper: 400)")
    solo.add_argument("--checkpoint", default=None, metavar="RUN_DIR",
                      help="audit this trained run (its layout) instead of scripted policies")
    solo.add_argument("--which", choices=("best", "latest"), default="best")
    solo.add_argument("--seeds", default="10000-10004", help="held-out seeds for --checkpoint (LO-HI or list)")
    solo.add_argument("--out", required=True, help="PNG path")
    return p


def audit_solo(layouts: list[str], policy_names: list[str], horizon: int, out: Path) -> dict:
    """§6.4: team vs solo deliveries per layout; Forced Coordination is the control."""
    unknown = [name for name in policy_names if name not in POLICIES]
    if unknown:
        raise SystemExit(f"omjax audit solo: unknown policies {unknown}; known: {', '.join(POLICIES)}")
    if horizon < 1:
        raise SystemExit(f"omjax audit solo: --horizon must be >= 1, got {horizon}")
    policies = [POLICIES[name] for name in policy_names]
    reports = {layout: solo_test_overcooked(layout, policies, horizon) for layout in layouts}
    plot_solo_test(reports, out, title=f"Solo test ({' + '.join(policy_names)}, {horizon} steps)")
    return {layout: report.summary() for layout, report in reports.items()}


def audit_solo_checkpoint(run_dir: Path, which: str, seeds: str, horizon: int, out: Path) -> dict:
    """§6.4 on a trained run: team vs each agent alone, on its own layout and held-out seeds."""
    if not (run_dir / "config.yaml").is_file():
        raise SystemExit(f"omjax audit solo: {run_dir} has no config.yaml (not a run directory)")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as e:
        raise SystemExit(f"omjax audit solo: {e}") from None
    cfg = load_config(run_dir / "config.yaml", [f"env.horizon={horizon}"])
    trainer, bank = load_policy(cfg, run_dir, which)
    if trainer is None:
        raise SystemExit(f"omjax audit solo: no {which} checkpoint in {run_dir}")
    report = solo_test_policy(trainer, bank, seed_list)
    plot_solo_test({cfg.env.layout: report}, out, title=f"Solo test: {run_dir.name} ({horizon} steps)")
    return {cfg.env.layout: report.summary()}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "audit":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    if args.kind == "macro":
        eval_dir = _eval_dir(args.eval)
        out = Path(args.out or eval_dir / "audit_macro.png")
        summary = audit_macro(eval_dir, out)
    elif args.kind == "patches":
        out = Path(args.out)
        summary = audit_patches(_labelled(args.eval), out, args.n_patches)
    elif args.kind == "heatmap":
        eval_dir = _eval_dir(args.eval)
        out = Path(args.out or eval_dir / "audit_heatmap.png")
        summary = audit_heatmap(eval_dir, out)
    elif args.checkpoint:
        out = Path(args.out)
        summary = audit_solo_checkpoint(Path(args.checkpoint), args.which, args.seeds, args.horizon, out)
    else:
        out = Path(args.out)
        summary = audit_solo(args.layouts, args.policies, args.horizon, out)
    summary_path = out.with_suffix(".json")
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out} and {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
