"""Shared machinery of the experiment scripts: scales, run layout, resuming, collecting.

Every script launches its runs from the configs in `configs/` (in this process, so compiled
programs are reused from run to run), skips what already finished, and renders its table or
figure from the runs' outputs. A run directory holds what `omjax train` writes plus `eval/`
from `omjax eval`; a run counts as finished when `eval/report.md` exists (`omjax eval` writes it
last), and a training run that stopped part-way is resumed from its newest checkpoint.

    <root>/table1/<game>/<backbone>/frozen/eval/...          (the frozen base: one per game x backbone)
    <root>/table1/<game>/<backbone>/ours/seed<k>/...
    <root>/table2/<game>/<cell>/...
    <root>/figures/fig1.png, fig2.png, fig3.png (+ .json summaries)

`--cpu` selects the CPU scale (SmolLM2-135M, the quick-start config's short episodes, 2 rounds of
2 rollouts, 3 evaluation episodes) that a 2-core machine runs; the default is the paper's scale.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

from omjax.config import load_config
from omjax.eval import cli as eval_cli
from omjax.eval.results import read_results
from omjax.train import cli as train_cli
from omjax.train.metrics import read_jsonl
from omjax.train.trainer import seed_dir

CONFIGS = REPO / "configs"

GAME_CONFIG_PREFIX = {"clean_up": "cleanup", "overcooked_aa": "overcooked_aa", "commons_harvest": "harvest"}
"""Table column key -> the prefix of its configs (`configs/<prefix>_<backbone>.yaml`)."""


@dataclass(frozen=True)
class Scale:
    """How big the runs of a script are."""

    name: str
    backbones: tuple[str, ...]
    """Config suffixes of the Table 1 backbones; Table 2 and the figures use the first."""
    seeds: tuple[int, ...]
    """Training seeds per Table 1 cell."""
    games: tuple[str, ...]
    """Table columns (keys of GAME_CONFIG_PREFIX) run by default."""
    overrides: tuple[str, ...]
    """Applied to every run after its config: shorter horizons and fewer rounds at CPU scale."""
    eval_episodes: int
    """Held-out evaluation episodes per run (seeds 10000, 10001, ...)."""
    harvest_eval_horizon: int
    """Episode length of the Fig. 2 patch-survival evaluation (paper: 400)."""

    def config(self, game: str, backbone: str) -> Path:
        """The config file of a game and backbone (the CPU scale uses the quickstart config)."""
        if self.name == "cpu":
            prefix = "overcooked" if game == "overcooked_aa" else GAME_CONFIG_PREFIX[game]
            return _existing(CONFIGS / f"quickstart_{prefix}_smollm2.yaml")
        return _existing(CONFIGS / f"{GAME_CONFIG_PREFIX[game]}_{backbone}.yaml")


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"config {path} not found")
    return path


PAPER = Scale(
    name="paper",
    backbones=("qwen3-4b", "qwen3.5-2b", "gemma-4-e4b", "gemma-4-e2b"),
    seeds=(0, 1, 2, 3, 4),
    games=("clean_up", "overcooked_aa", "commons_harvest"),
    overrides=(),
    eval_episodes=20,
    harvest_eval_horizon=400,
)

CPU = Scale(
    name="cpu",
    backbones=("smollm2",),
    seeds=(0, 1),
    games=("overcooked_aa",),
    overrides=("model.name=smollm2-135m", "train.rounds=2", "train.rollouts=2", "run.progress=false"),
    eval_episodes=3,
    harvest_eval_horizon=100,
)


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default="runs/experiments", help="directory holding every run of the scripts")
    parser.add_argument("--cpu", action="store_true", help="CPU scale: SmolLM2-135M, short horizons, few rounds")
    parser.add_argument("--games", nargs="+", default=None, choices=sorted(GAME_CONFIG_PREFIX),
                        help="restrict to these table columns (default: the scale's)")
    parser.add_argument("--render-only", action="store_true", help="render from finished runs; launch nothing")
    parser.add_argument("--episodes", type=int, default=None,
                        help="held-out evaluation episodes per run (default: the scale's)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="extra config overrides for every run (applied last)")


def scale_of(args: argparse.Namespace) -> Scale:
    scale = CPU if args.cpu else PAPER
    if args.episodes is not None:
        if args.episodes < 1:
            raise SystemExit(f"--episodes must be >= 1, got {args.episodes}")
        scale = dataclasses.replace(scale, eval_episodes=args.episodes)
    return scale


def games_of(args: argparse.Namespace, scale: Scale) -> tuple[str, ...]:
    return tuple(args.games) if args.games else scale.games


# ---------------------------------------------------------------------------------------------
# Launching and resuming.


def is_finished(run_dir: Path) -> bool:
    return (Path(run_dir) / "eval" / "report.md").is_file()


def _rounds_done(run_dir: Path) -> int:
    return len(read_jsonl(Path(run_dir) / "metrics.jsonl"))


def train(config: Path, overrides: list[str], run_dir: Path) -> None:
    """`omjax train` into `run_dir`, resuming a stopped run; nothing when training finished."""
    run_dir = Path(run_dir)
    rounds = load_config(config, overrides).train.rounds
    if (run_dir / "config.yaml").is_file() and _rounds_done(run_dir) >= rounds:
        return
    if (run_dir / "checkpoints").is_dir() and any((run_dir / "checkpoints").iterdir()):
        argv = ["train", "--resume", str(run_dir), *overrides]
    else:
        argv = ["train", "--config", str(config), *overrides, f"run.out_dir={run_dir}"]
    if train_cli.main(argv) != 0:
        raise RuntimeError(f"omjax {' '.join(argv)} failed")


def train_group(config: Path, overrides: list[str], group_dir: Path, seeds: list[int]) -> None:
    """`omjax train --seeds` of every seed in one program into `group_dir/seed_<s>`, resuming a
    stopped group; nothing when every seed finished training."""
    group_dir = Path(group_dir)
    rounds = load_config(config, overrides).train.rounds
    dirs = [seed_dir(group_dir, s) for s in seeds]
    if all((d / "config.yaml").is_file() and _rounds_done(d) >= rounds for d in dirs):
        return
    seed_list = ",".join(map(str, seeds))
    if all((d / "checkpoints").is_dir() and any((d / "checkpoints").iterdir()) for d in dirs):
        argv = ["train", "--resume", str(group_dir), "--seeds", seed_list, *overrides]
    else:
        argv = ["train", "--config", str(config), "--seeds", seed_list, *overrides,
                f"run.out_dir={group_dir}", "--overwrite"]
    if train_cli.main(argv) != 0:
        raise RuntimeError(f"omjax {' '.join(argv)} failed")


def evaluate(run_dir: Path, episodes: int, overrides: list[str] = (), *, config: Path | None = None,
             label: str | None = None, compare: list[Path] = ()) -> None:
    """`omjax eval` of a trained run (or, with `config`, of the frozen base) into `run_dir/eval`."""
    run_dir = Path(run_dir)
    if is_finished(run_dir):
        return
    source = ["--config", str(config)] if config is not None else ["--checkpoint", str(run_dir)]
    argv = ["eval", *source, "--out", str(run_dir / "eval"), "--seeds", eval_seed_range(episodes), "--quiet"]
    if label:
        argv += ["--label", label]
    if compare:
        argv += ["--compare", *map(str, compare)]
    argv += list(overrides)
    if eval_cli.main(argv) != 0:
        raise RuntimeError(f"omjax {' '.join(argv)} failed")


def run_policy(config: Path, overrides: list[str], run_dir: Path, episodes: int, *, label: str,
               compare: list[Path] = ()) -> None:
    """One table entry: a frozen policy (`train.train=false` among the overrides) is evaluated
    straight from its config; any other is trained (resuming a stopped run), then its best
    checkpoint is evaluated."""
    if "train.train=false" in overrides:
        evaluate(run_dir, episodes, overrides, config=config, label=label, compare=compare)
    else:
        train(config, overrides, run_dir)
        evaluate(run_dir, episodes, label=label, compare=compare)


def eval_seed_range(episodes: int) -> str:
    """The held-out seeds of the paper's protocol: 10000 .. 10000 + episodes - 1 (§6.1)."""
    if episodes < 1:
        raise ValueError(f"need at least one evaluation episode, got {episodes}")
    return f"10000-{10000 + episodes - 1}"


# ---------------------------------------------------------------------------------------------
# Collecting finished runs.


def team_returns(run_dir: Path) -> list[float]:
    """Per-episode team returns of a finished run (empty when it has not finished)."""
    if not is_finished(run_dir):
        return []
    return [r.team_return for r in read_results(Path(run_dir) / "eval" / "eval.jsonl")]


def training_collapsed(run_dir: Path) -> bool:
    """Every training rollout of every round scored zero (the paper's dagger in Table 2)."""
    rows = read_jsonl(Path(run_dir) / "metrics.jsonl")
    return bool(rows) and all(max(r["team_returns"]) == 0 for r in rows)


def table1_frozen_dir(root: Path, game: str, backbone: str) -> Path:
    return Path(root) / "table1" / game / backbone / "frozen"


def table1_ours_group(root: Path, game: str, backbone: str) -> Path:
    """The multi-seed training run of one Table 1 cell, every seed on the library it draws (one
    `seed_<s>` run per seed below it)."""
    return Path(root) / "table1" / game / backbone / "ours"


def table1_ours_dir(root: Path, game: str, backbone: str, seed: int) -> Path:
    return seed_dir(table1_ours_group(root, game, backbone), seed)


def table2_dir(root: Path, game: str, cell: str) -> Path:
    return Path(root) / "table2" / game / cell


def collect_table1(root: Path, scale: "Scale", games) -> dict:
    """(backbone, variant, game) -> one evaluation mean per finished run.

    The frozen base has no training seed, so its single evaluation stands for every seed.
    """
    out: dict[tuple[str, str, str], list[float]] = {}
    for game in games:
        for backbone in scale.backbones:
            frozen = team_returns(table1_frozen_dir(root, game, backbone))
            if frozen:
                out[(backbone, "frozen", game)] = [float(np.mean(frozen))]
            means = [float(np.mean(r)) for s in scale.seeds
                     if (r := team_returns(table1_ours_dir(root, game, backbone, s)))]
            if means:
                out[(backbone, "ours", game)] = means
    return out


def collect_table2(root: Path, cells, games) -> tuple[dict, list]:
    """((cell, game) -> per-episode team returns, [(cell, game) whose training collapsed])."""
    returns: dict[tuple[str, str], list[float]] = {}
    collapsed: list[tuple[str, str]] = []
    for game in games:
        for cell in cells:
            run = table2_dir(root, game, cell)
            values = team_returns(run)
            if values:
                returns[(cell, game)] = values
                if training_collapsed(run):
                    collapsed.append((cell, game))
    return returns, collapsed


def run_game(run_dir: Path) -> str:
    """The table column (key of GAME_CONFIG_PREFIX) a finished run played, from its config.yaml;
    Overcooked layouts other than AA are named `overcooked_<layout>`."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} holds no config.yaml: not a run directory")
    env = load_config(path).env
    if env.game == "overcooked":
        return "overcooked_aa" if env.layout == "asymmetric_advantages" else f"overcooked_{env.layout}"
    prefix_to_key = {prefix: key for key, prefix in GAME_CONFIG_PREFIX.items()}
    return prefix_to_key[env.game]


def write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
