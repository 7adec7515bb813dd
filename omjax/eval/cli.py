"""`omjax eval`: held-out evaluation of a trained checkpoint or of the frozen base (§6.1).

    omjax eval --checkpoint runs/quickstart [--episodes 20 --seeds 10000-10019] [key=value ...]
    omjax eval --config configs/quickstart_overcooked_smollm2.yaml --label frozen   # no training
    omjax eval --checkpoint runs/x --compare runs/frozen/eval                       # + Mann-Whitney

Each held-out seed s plays one episode through the training rollout engine (same game, prompts,
interface and sampling temperature as training) with the episode seed derived from s alone, so
evaluation seeds (10000+) never coincide with training episodes (run seed, round, rollout).
Per episode it writes one `eval.jsonl` line (team and per-agent returns in task units --
deliveries or apples --, macro and primitive-action counts, call ratio, parse failures, invalid
emissions), the trajectory (`trajectories/seed<s>.npz`) and the decisions
(`decisions/seed<s>.jsonl`). Finished seeds are skipped on a rerun. `report.md` comes last:
bootstrap CIs, per-agent tables, and two-sided Mann-Whitney U against every `--compare` policy.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from omjax.config import EXIT_ERROR, ConfigError, load_config
from omjax.envs.meltingpot.workers import RolloutWorkerError
from omjax.eval.results import EpisodeResult, Trajectory, read_results, render_report, trajectory_path, write_results
from omjax.games.base import Game
from omjax.jax_cache import enable_compilation_cache
from omjax.train.checkpoint import Checkpointer
from omjax.train.cli import parse_seeds
from omjax.train.launch import EXIT_FAILED, EXIT_INTERRUPTED, USER_ERRORS, preflight
from omjax.train.metrics import write_jsonl_atomic
from omjax.train.rollout import collect, decision_record
from omjax.train.trainer import Trainer, deferred_sigint


class _Recorder:
    """What the audits need from a rollout, read off the `Game` after every env step
    (`collect(..., on_step=recorder)`): positions, per-agent returns in task units (deliveries,
    apples) and the game's extras (Commons Harvest's patches alive)."""

    def __init__(self, game: Game):
        self.walls = np.asarray(game.walls(), bool)
        self.positions: list[np.ndarray] = []
        self.patches: list[np.ndarray] = []
        self.agent_units = np.zeros((0, game.n_agents))
        self.extras: dict[str, np.ndarray] = {}

    def __call__(self, game: Game) -> None:
        self.agent_units = np.asarray(game.agent_returns(), float)
        self.positions.append(np.asarray(game.positions()))
        self.extras = game.extras()
        if "patches_alive" in self.extras:
            self.patches.append(np.asarray(self.extras["patches_alive"]))

    def trajectory(self, k: int = 0) -> Trajectory:
        positions = np.stack(self.positions)[:, k, :, ::-1].astype(np.int32)  # [T, A, 2] (row, col)
        patches = np.stack(self.patches)[:, k].astype(np.int32) if self.patches else None
        return Trajectory(positions=positions, walls=self.walls, patches_alive=patches)


def _episode_result(cfg, label, seed, batch, recorder: _Recorder, game: Game) -> EpisodeResult:
    n = batch.n_agents
    unit = game.delivery_reward or 1.0
    macro = [dict() for _ in range(n)]
    primitive = [dict() for _ in range(n)]
    native = cfg.policy.action_interface == "native"
    for d in batch.decisions:
        opt = d.menu[d.action].opt
        counts = primitive[d.agent] if native else macro[d.agent]
        counts[opt] = counts.get(opt, 0) + 1
    extras = recorder.extras
    invalid = extras.get("invalid_emissions", np.zeros((1, n), int))[0] + extras.get("noop_emissions", np.zeros((1, n), int))[0]
    return EpisodeResult(
        policy=label, game=cfg.env.game, layout=cfg.env.layout, interface=cfg.policy.action_interface,
        seed=int(seed), env_steps=int(batch.steps), team_return=float(batch.returns[0] / unit),
        agent_returns=tuple(float(v) for v in recorder.agent_units[0]),
        llm_calls=tuple(int(v) for v in batch.decision_counts()),
        parse_failures=tuple(int(v) for v in batch.parse_failures()),
        invalid_actions=tuple(int(v) for v in invalid),
        macro_counts=tuple(macro), primitive_counts=tuple(primitive),
        agent_cleaned=tuple(int(v) for v in game.probes(0).cleaned) if cfg.env.game == "cleanup" else (),
    )


def evaluate(cfg, bank, trainer, seeds: list[int], out: Path, label: str, progress: bool = True) -> list[EpisodeResult]:
    """Play one episode per held-out seed (skipping seeds already in `out/eval.jsonl`)."""
    done = {r.seed: r for r in read_results(out / "eval.jsonl")} if (out / "eval.jsonl").is_file() else {}
    (out / "decisions").mkdir(parents=True, exist_ok=True)
    for seed in tqdm(seeds, desc=f"eval {label}", unit="episode", disable=not progress):
        if seed in done:
            continue
        recorder = _Recorder(trainer.game)
        try:
            batch = collect(trainer.game, trainer.decider, trainer.model.params, bank, 1, jax.random.PRNGKey(seed),
                            seed, 0, progress=progress, on_step=recorder)
        except RolloutWorkerError as err:
            raise RolloutWorkerError(f"held-out seed {seed}: {err} (finished seeds are kept; rerun this one alone "
                                     f"with --seeds {seed})") from err
        result = _episode_result(cfg, label, seed, batch, recorder, trainer.game)
        with deferred_sigint():
            recorder.trajectory(0).save(trajectory_path(out, seed))
            write_jsonl_atomic(out / "decisions" / f"seed{seed}.jsonl",
                               [decision_record(d, 0) for d in batch.decisions])
            write_results(out / "eval.jsonl", [result], append=True)
        done[seed] = result
    return [done[s] for s in seeds]


def load_policy(cfg, checkpoint: Path | None, which: str = "best"):
    """(trainer, adapter bank) of a run's checkpoint, or of the frozen base (zero adapters) when
    `checkpoint` is None. `which="latest"` falls back past broken checkpoints to the newest
    intact one (each skip printed); FileNotFoundError or CheckpointError when none can be read."""
    enable_compilation_cache()
    trainer = Trainer(cfg, run_dir=Path(cfg.run.out_dir))
    state = trainer.init_state()
    if checkpoint is None:
        return trainer, state.bank
    ckpt = Checkpointer(checkpoint, cfg.run.keep_checkpoints)
    try:
        restored = ckpt.restore(state, which, per_layer=trainer.per_layer)
    finally:
        ckpt.close()
    for line in restored.skipped:
        print(f"skipped checkpoint {line}")
    if which == "best" and "adapters_of_round" in restored.meta:
        print(f"restored the best checkpoint {restored.path}: the adapters that collected round "
              f"{restored.meta['adapters_of_round']} (before its update)")
    else:
        print(f"restored the {which} checkpoint {restored.path} (after round {restored.meta.get('round')})")
    return trainer, restored.state.bank


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="omjax eval", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="RUN_DIR", help="run directory written by `omjax train`")
    src.add_argument("--config", help="YAML run config: evaluate the frozen base (adapters at zero)")
    p.add_argument("--which", choices=("best", "latest"), default="best",
                   help="checkpoint to evaluate (paper: best = highest training-time team return)")
    p.add_argument("--episodes", type=int, default=None, help="held-out episodes (default 20)")
    p.add_argument("--seeds", default=None, help="held-out seeds, LO-HI or a comma list (default 10000-...)")
    p.add_argument("--out", default=None, help="output directory (default <run>/eval or runs/eval_<label>)")
    p.add_argument("--label", default=None, help="policy name in the report (default: the run directory name)")
    p.add_argument("--compare", nargs="*", default=[], metavar="EVAL_DIR",
                   help="other evaluations (directories with eval.jsonl) to test against")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (e.g. env.horizon=40)")
    return p


def _seed_list(args) -> list[int]:
    if args.episodes is not None and args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    if args.seeds is None:
        return list(range(10_000, 10_000 + (args.episodes or 20)))
    seeds = parse_seeds(args.seeds)
    if args.episodes is not None and args.episodes != len(seeds):
        raise ValueError(f"--episodes {args.episodes} but --seeds {args.seeds} names {len(seeds)} seeds")
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ValueError(f"--seeds {args.seeds} must name distinct seeds")
    return seeds


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "eval":
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except USER_ERRORS as err:
        if args.debug:
            raise
        print(f"omjax eval: {err}", file=sys.stderr)
        return EXIT_ERROR
    except RolloutWorkerError as err:
        if args.debug:
            raise
        print(f"omjax eval: {err}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\nomjax eval: interrupted; finished episodes are kept in eval.jsonl and skipped when the same "
              "command runs again", file=sys.stderr)
        return EXIT_INTERRUPTED


def _run(args) -> int:
    try:
        seeds = _seed_list(args)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if args.checkpoint:
        run_dir = Path(args.checkpoint)
        if not (run_dir / "config.yaml").is_file():
            raise FileNotFoundError(f"--checkpoint {run_dir}: no config.yaml (not a run directory)")
        cfg = load_config(run_dir / "config.yaml", args.overrides)
        label = args.label or run_dir.name
        out = Path(args.out or run_dir / "eval")
    else:
        cfg = load_config(args.config, args.overrides)
        label = args.label or f"frozen_{Path(args.config).stem}"
        out = Path(args.out or Path("runs") / f"eval_{label}")
    preflight(cfg)
    compare = []
    for other in args.compare:
        path = Path(other)
        path = path / "eval.jsonl" if path.is_dir() else path
        compare += read_results(path)

    # Evaluation scores the task alone (deliveries, apples): a training-time progress bonus would
    # inflate the returns the tables and tests compare.
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, reward_shaping=0.0))
    trainer, bank = load_policy(cfg, Path(args.checkpoint) if args.checkpoint else None, args.which)
    results = evaluate(cfg, bank, trainer, seeds, out, label, progress=not args.quiet)
    report = render_report(results + [r for r in compare if r.policy != label])
    (out / "report.md").write_text(report)
    returns = [r.team_return for r in results]
    print(f"{label}: team return {np.mean(returns):.2f} ± {np.std(returns, ddof=1) if len(returns) > 1 else 0.0:.2f} "
          f"over {len(returns)} episodes -> {out / 'eval.jsonl'}, {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
