"""Does PA-MAGRPO learn? The frozen base against the trained team on held-out seeds (issue 15).

    python -m experiments.paper.learning --cpu                               # Overcooked AA, per-agent adapters
    python -m experiments.paper.learning --cpu --variants per_agent shared_lora
    python -m experiments.paper.learning --cpu --game overcooked_h20         # 20-step training, 150-step held out
    python -m experiments.paper.learning --cpu --game overcooked_q_last_burn_realign3_12 --eval-seed0 10700
    python -m experiments.paper.learning --cpu --game cleanup                # Melting Pot, 7 agents
    python -m experiments.paper.learning --cpu --render-only                 # report from finished runs
    python -m experiments.paper.learning --cpu --root R2 --eval-seed0 10016  # replay on fresh held-out seeds

A setting is one file `configs/lab/<game>.yaml` (`load_settings`), committed before any of its
held-out episodes was played: a one-line `why:`, its `outcome:` once run, the config it starts
from, the overrides (the plug-in keys `train.credit` and `train.objective` included), the
reported unit and the held-out episodes (`eval:`, with overrides of their own, e.g. a longer
horizon than the training episodes'). A setting whose keys left the library says `removed:`
and the commit where it last runs; it does not load here. One run trains the setting with
per-agent adapters (`per_agent`) or one adapter shared by every agent (`shared_lora`, Ablation
B), then plays the frozen base (zero adapters) and the adapters of the LAST round on the
held-out seeds 10000, 10001, ... (never training seeds: those come from
`episode_seed(seed, round, k)`) with `omjax.eval.heldout`. Scores are the env's own task
events, never the shaped training reward: soups delivered (Overcooked), apples eaten and, for
Commons Harvest, patches alive at the end. Writes, under `<root>/<game>/`:

    <variant>/metrics.jsonl, learning_curve.png   training rounds (shaped return, real units, KL)
    <variant>/decisions/round_XXXX.jsonl          every training decision (`experiments/lab/idle_picks.py`)
    <policy>/eval.jsonl                           one line per held-out episode
    macro_<policy>.png                            per-agent macro-choice histogram
    report.md, summary.json                       bootstrap CIs, Mann-Whitney U of trained vs frozen
                                                  (the score; the shaped return as a secondary)

Finished pieces are skipped on a second call (a stopped training run resumes from its newest
checkpoint, a stopped evaluation from its last finished batch of episodes, and a longer
`--episodes` plays only the batches it adds), so the script can be rerun until everything is done.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from experiments.paper import common

from omjax.config import dump_config, load_config
from omjax.eval import heldout
from omjax.eval.audits import plot_macro_histogram
from omjax.eval.heldout import evaluate
from omjax.train.checkpoint import Checkpointer
from omjax.train.metrics import MetricsLog
from omjax.train.trainer import Trainer, write_decisions

LAB = common.CONFIGS / "lab"
"""One YAML file per setting (`load_settings`)."""


@dataclass(frozen=True)
class Setting:
    """One game's CPU-scale run, as `configs/lab/<game>.yaml` declares it."""

    config: str
    """Config file under configs/ the overrides apply to."""
    overrides: tuple[str, ...]
    """The file's `overrides:` mapping as `key=value` strings, in the file's order."""
    unit: str
    """What the game's `agent_returns()` counts (the reported score)."""
    eval_episodes: int
    eval_batch: int
    """Held-out episodes played together in one batched rollout."""
    eval_overrides: tuple[str, ...] = ()
    """Applied on top of `overrides` for the held-out episodes only (e.g. a longer horizon than
    the training episodes'); the frozen base and every variant are evaluated under them, by one
    trainer per distinct held-out config (`HeldOut`)."""
    why: str = ""
    """Why the setting was tried, in one line."""
    outcome: str | None = None
    """Its held-out result, with the date and commit of the outputs; None before it has run."""


SETTING_KEYS = {"why", "declared", "outcome", "removed", "config", "unit", "overrides", "eval"}
"""The top-level keys a `configs/lab/*.yaml` file may have."""


def flatten(tree: Mapping, prefix: str = "") -> tuple[str, ...]:
    """A nested mapping as `a.b=value` overrides (values written as YAML, so they parse back)."""
    out = []
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out += flatten(value, f"{prefix}{key}.")
        else:
            text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
            out.append(f"{prefix}{key}={text.removesuffix('...').strip()}")
    return tuple(out)


def read_setting(path: Path) -> dict:
    """One `configs/lab/*.yaml` file as plain data; a file without `why:` or with unknown keys
    is an error naming it."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    unknown = sorted(set(data) - SETTING_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(SETTING_KEYS))})")
    for key in ("why", "config", "unit", "overrides", "eval"):
        if not data.get(key):
            raise ValueError(f"{path}: needs `{key}:`")
    return data


def load_settings(folder: Path = LAB) -> tuple[dict[str, Setting], dict[str, dict]]:
    """(the settings that load, by game name; the removed ones' files, by name)."""
    settings, removed = {}, {}
    for path in sorted(Path(folder).glob("*.yaml")):
        data = read_setting(path)
        if data.get("removed"):
            removed[path.stem] = data
            continue
        held = data["eval"]
        settings[path.stem] = Setting(data["config"], flatten(data["overrides"]), data["unit"],
                                      int(held["episodes"]), int(held["batch"]), flatten(held.get("overrides") or {}),
                                      why=data["why"], outcome=data.get("outcome"))
    return settings, removed


SETTINGS, REMOVED = load_settings()

VARIANTS = {"per_agent": (), "shared_lora": ("train.shared_lora=true",)}

EVAL_SEED0 = 10000


# ---------------------------------------------------------------------------------------------
# Training.


def train(trainer: Trainer, run_dir: Path) -> tuple[object, list[dict]]:
    """Train to `train.rounds` (resuming from the newest checkpoint); each metrics row also
    holds `units`, the env's real task count of each of the K rollouts. Returns (last bank, rows)."""
    cfg = trainer.cfg
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, run_dir / "config.yaml")
    ckpt = Checkpointer(run_dir, cfg.run.keep_checkpoints)
    state = trainer.init_state()
    if ckpt.latest_round() is not None:
        state = ckpt.restore(state).state
    log = MetricsLog(run_dir, start_round=int(state.round))
    try:
        for r in range(int(state.round), cfg.train.rounds):
            before = state
            state, row, batch = trainer.round(state)
            row["units"] = trainer.game.agent_returns().sum(axis=1).tolist()  # [K] real task events
            if cfg.run.save_decisions:  # as `omjax train` writes them
                write_decisions(run_dir, batch, r)
            log.append(row)
            # As the trainer: the best checkpoint holds the adapters that collected the best round.
            best = before.replace(best_return=state.best_return) if row["best"] else None
            ckpt.save(state, {"round": r + 1, "adapters_of_round": r, "metrics": row}, best=best)
            plot_curve(log.rows, run_dir / "learning_curve.png", f"{cfg.env.game} {cfg.env.layout}")
            print(f"  round {r}: shaped return {row['team_return_mean']:.1f}, real {np.mean(row['units']):.2f}, "
                  f"kl {row['kl']}, {row['time_s']:.0f}s", flush=True)
    finally:
        ckpt.close()
    return state.bank, log.rows


def plot_curve(rows: list[dict], path: Path, title: str) -> None:
    """Per round: the shaped training return and the real task units (mean and min-max over K)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r["round"] for r in rows]
    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for ax, key, name in ((axes[0], "team_returns", "shaped training return"), (axes[1], "units", "real units")):
        vals = [np.asarray(r[key], float) for r in rows]
        ax.fill_between(rounds, [v.min() for v in vals], [v.max() for v in vals], alpha=0.25)
        ax.plot(rounds, [v.mean() for v in vals], marker="o")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    axes[1].set_xlabel("round")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Report.


def summarize(name: str, episodes: list[dict], n_agents: int, out_dir: Path, unit: str) -> dict:
    """`heldout.summarize`'s row for policy `name`, its macro histogram drawn to `out_dir`."""
    row = {"policy": name, **heldout.summarize(episodes, unit, n_agents)}
    options = list(row["macro_counts"])
    per_option = np.array([row["macro_counts"][o] for o in options], dtype=np.int64).reshape(len(options), n_agents)
    plot_macro_histogram(per_option.T, options, out_dir / f"macro_{name}.png", title=f"{name}: per-agent macro choices")
    return row


def report(game: str, setting: Setting, seeds: list[int], rows: dict[str, dict], tests: dict[str, dict],
           times: dict, overrides: Sequence[str] = ()) -> str:
    unit = setting.unit
    lines = [f"# Does PA-MAGRPO learn? {game} at CPU scale", "",
             f"Held-out seeds {seeds[0]}..{seeds[-1]}; score: real {unit} "
             "counted from the env's events (not the shaped training reward).", "",
             f"| policy | episodes | {unit} (mean) | 95 % bootstrap CI | shaped return (secondary) | 95 % CI |",
             "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['episodes']} | {r[f'{unit}_mean']:.2f} | [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] "
                     f"| {r['shaped_return_mean']:.1f} | [{r['shaped_return_ci95'][0]:.1f}, "
                     f"{r['shaped_return_ci95'][1]:.1f}] |")
    lines += ["", f"| comparison | U ({unit}) | p (two-sided Mann-Whitney) | P(trained > frozen) "
              "| U (shaped, secondary) | p |", "|---|---|---|---|---|---|"]
    for name, t in tests.items():
        lines.append(f"| {name} vs frozen | {t['u']:.1f} | {t['p']:.4f} | {t['effect']:.2f} "
                     f"| {t['shaped_u']:.1f} | {t['shaped_p']:.4f} |")
    lines += ["", "Settings: " + " ".join(setting.overrides), "",
              "Command-line overrides (applied last): " + (" ".join(overrides) or "(none)"), "",
              "Held-out episodes also: " + (" ".join(setting.eval_overrides) or "(none)"), "",
              "Wall time (s, this machine, shared): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items())]
    return "\n".join(lines) + "\n"


class HeldOut:
    """The trainers that play held-out episodes: one per distinct held-out config (`run.out_dir`
    aside), built on first use and kept, so the frozen base and a variant held out under the same
    config (`policy.realign` included: realigning the base's zero adapter plays the base itself,
    bit for bit, `tests/train/test_policy.py`) share one set of compiled programs. A new bank
    shape or call shape compiles the whole backbone (10-20 s each on this CPU), and the two sides
    meet mostly the same shapes."""

    def __init__(self, model=None):
        self.model, self._trainers = model, {}

    def trainer(self, cfg) -> Trainer:
        key = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, out_dir="-"))
        if key not in self._trainers:
            self._trainers[key] = Trainer(cfg, model=self.model)
            self.model = self._trainers[key].model
        return self._trainers[key]

    def close(self) -> None:
        for trainer in self._trainers.values():
            trainer.game.close()  # Melting Pot worker processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the CPU-scale settings (the only scale defined here)")
    parser.add_argument("--game", default="overcooked", choices=sorted([*SETTINGS, *REMOVED]),
                        help="a setting, configs/lab/<game>.yaml")
    parser.add_argument("--variants", nargs="+", default=["per_agent"], choices=sorted(VARIANTS))
    parser.add_argument("--root", default="runs/learning")
    parser.add_argument("--episodes", type=int, default=None, help="held-out episodes per policy")
    parser.add_argument("--eval-seed0", type=int, default=EVAL_SEED0,
                        help="first held-out seed (a fresh range confirms a result on episodes never looked at)")
    parser.add_argument("--render-only", action="store_true", help="report from finished pieces; play nothing")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides applied last")
    args = parser.parse_args(argv)
    if not args.cpu:
        raise SystemExit("learning.py defines only the CPU scale: pass --cpu")
    if args.game in REMOVED:
        raise SystemExit(f"{args.game}: its keys were removed from the library; it last runs at commit "
                         f"{REMOVED[args.game]['removed']} (configs/lab/{args.game}.yaml)")
    setting = SETTINGS[args.game]
    episodes = args.episodes or setting.eval_episodes
    if episodes < 2:
        raise SystemExit(f"--episodes must be >= 2 (a Mann-Whitney test needs them), got {episodes}")
    root = Path(args.root) / args.game
    if args.eval_seed0 < EVAL_SEED0:
        raise SystemExit(f"--eval-seed0 must be >= {EVAL_SEED0} (seeds below are not held out), got {args.eval_seed0}")
    seeds = list(range(args.eval_seed0, args.eval_seed0 + episodes))
    times: dict[str, float] = {}
    held = HeldOut()
    rows, tests, episodes_of = {}, {}, {}
    try:
        for name in ["frozen", *args.variants]:
            overrides = [*setting.overrides, *VARIANTS.get(name, ()), *args.overrides, f"run.out_dir={root / name}"]
            cfg = load_config(common.CONFIGS / setting.config, overrides)
            path = root / name / "eval.jsonl"
            if args.render_only:
                if not path.is_file():
                    continue
                run = None
            else:
                eval_cfg = load_config(common.CONFIGS / setting.config,
                                       [*setting.overrides, *VARIANTS.get(name, ()), *setting.eval_overrides,
                                        *args.overrides, f"run.out_dir={root / name}"])
                t0 = time.time()
                if name == "frozen":
                    trainer = held.trainer(eval_cfg)
                    bank = trainer.init_state().bank  # B = 0: exactly the base model
                else:
                    learner = Trainer(cfg, model=held.model)  # the frozen base's trainer loaded the model
                    try:
                        bank = train(learner, root / name)[0]
                    finally:
                        learner.game.close()
                    times[f"{name} train"] = time.time() - t0
                    trainer = held.trainer(eval_cfg)
                t0 = time.time()
                run = lambda chunk: evaluate(trainer, bank, chunk, len(chunk))
            episodes_of[name] = heldout.load_or_play(path, seeds, setting.eval_batch, run)
            if run is not None:
                times[f"{name} eval"] = time.time() - t0
            rows[name] = summarize(name, episodes_of[name], cfg.env.n_agents, root, setting.unit)
            if name != "frozen" and "frozen" in episodes_of:
                tests[name] = heldout.compare(episodes_of[name], episodes_of["frozen"])
    finally:
        held.close()
    text = report(args.game, setting, seeds, rows, tests, times, args.overrides)
    common.write_text(root / "report.md", text)
    (root / "summary.json").write_text(json.dumps({"policies": rows, "tests": tests, "wall_s": times,
                                                   "seeds": seeds, "settings": list(setting.overrides),
                                                   "overrides": list(args.overrides),
                                                   "eval_overrides": list(setting.eval_overrides)}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
