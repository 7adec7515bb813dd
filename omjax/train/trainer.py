"""PA-MAGRPO training rounds (Algorithm 1) with checkpoints, metrics and a learning curve.

    trainer = Trainer(load_config("configs/quickstart_overcooked_smollm2.yaml"))
    rows = trainer.run()            # or trainer.run(resume=True) to continue a killed run

One round reads collect -> credit -> update: collect K joint rollouts under the current bank;
credit each decision (`train.credit`, `omjax.train.credit`; the paper's: the rollout's team return
normalised within the cohort); take E epochs of the objective (`train.objective`,
`omjax.train.objectives`; the paper's: PPO clip + KL) per adapter over its own decisions (one
jitted call over the bank); write metrics, decisions and a checkpoint.

Several training seeds train in one process as a group (`Trainer(cfg, seeds=[0, 1, 2])`, CLI
`--seeds 0-2`): one frozen base, an adapter bank of S x A adapters (seed slot s owns rows
s*A .. s*A+A-1), the K rollouts of every seed stepped together so that each backbone call carries
every seed's pending decisions, cohort advantages per seed, one jitted update over all S x A
adapters. Under `env.library: sampled` each seed plays the library it draws: seeds that drew
different ones play one `GroupGame` (one game per library, each seed's episodes on its own).
Each seed writes its own run directory `<out_dir>/seed_<s>` in the single-seed format, and its
results are those of the seed run alone (up to float rounding of the larger batches).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from omjax.config import Config, LoRAConfig, dump_config
from omjax.envs.meltingpot.workers import RolloutWorkerError
from omjax.jax_cache import compilations
from omjax.games import guards_file, make_group_game
from omjax.models import load
from omjax.models import loader
from omjax.models import lora as lora_lib
from omjax.options.libraries import LIBRARY_FILE, library_record, resolve_library, write_library_record
from omjax.train.checkpoint import Checkpointer, TrainState
from omjax.train.credit import CohortCreditor, make_credit
from omjax.train.metrics import MetricsLog, plot_learning_curve, write_jsonl_atomic
from omjax.train.policy import LetterPolicy, SamplePolicy
from omjax.train.oom import device_memory, plan_estimate
from omjax.train.sharding import Placement, staging_device, to_host
from omjax.train.rollout import Decider, RolloutBatch, collect_group, decision_record, segment_start, update_inputs
from omjax.train.update import (UpdateSettings, active_minibatches, init_opt_state, make_bank_update,
                                make_optimizer)


GROUP_FILE = "group.json"
"""In the root of a multi-seed run: `{"seeds": [...]}`; each seed's run is `seed_<s>/` below it."""


def seed_dir(root: str | Path, seed: int) -> Path:
    """Run directory of training seed `seed` in the multi-seed run at `root`."""
    return Path(root) / f"seed_{seed}"


def read_group(root: str | Path) -> list[int] | None:
    """The seeds of the multi-seed run at `root`, or None when `root` is a single-seed run."""
    path = Path(root) / GROUP_FILE
    return json.loads(path.read_text())["seeds"] if path.is_file() else None


def _stack(trees: list[Any]) -> Any:
    """Per-seed banks [A, ...] -> one bank [S*A, ...] (the tree itself for one seed)."""
    return trees[0] if len(trees) == 1 else jax.tree.map(lambda *xs: jnp.concatenate(xs), *trees)


def _slot(tree: Any, s: int, n: int, total: int) -> Any:
    """Rows s*n .. s*n+n-1 of a bank-shaped tree (the tree itself when it is one seed's)."""
    return tree if n == total else jax.tree.map(lambda x: x[s * n:(s + 1) * n], tree)


def stop_token_ids(tokenizer: Any) -> list[int]:
    """End-of-turn tokens that end a sampled reply."""
    ids = {tokenizer.eos_token_id}
    for name in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<turn|>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return sorted(i for i in ids if i is not None)


def make_policy(cfg: Config, model: Any, lora_cfg: LoRAConfig, remat: bool | int | None = None) -> LetterPolicy | SamplePolicy:
    """The configured decision mode on `model`; with `lora.top_layers`, the layers below the
    adapters form a frozen trunk that the update computes once per round. `remat`: the update's
    rematerialisation (`oom.planned_remat`); None: `train.remat`, `auto` as none."""
    remat = (0 if cfg.train.remat == "auto" else cfg.train.remat) if remat is None else remat
    top = cfg.lora.top_layers
    frozen = model.config.num_layers - top if top else 0
    if cfg.policy.decision_mode == "letter":
        return LetterPolicy(model.family, model.config, lora_cfg.scale, cfg.policy.temperature,
                            remat=remat, frozen_layers=frozen, reply_only=cfg.lora.scope == "reply",
                            realign=cfg.policy.realign)
    tok = model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return SamplePolicy(model.family, model.config, lora_cfg.scale, cfg.policy.temperature,
                        cfg.policy.max_new_tokens, stop_token_ids(tok), pad, remat=remat,
                        frozen_layers=frozen)


def write_decisions(run_dir: Path, batch: RolloutBatch, r: int) -> None:
    """Every decision of round r to `run_dir/decisions/round_XXXX.jsonl` (`run.save_decisions`;
    read by the audits and `experiments/lab/idle_picks.py`)."""
    (run_dir / "decisions").mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(run_dir / "decisions" / f"round_{r:04d}.jsonl", [decision_record(d, r) for d in batch.decisions])


def summarize_update(metrics: Any) -> dict:
    """Round-level update statistics from per-step metrics [G, E, n_mb] (stepped steps only)."""
    m = to_host(metrics)
    stepped = m.stepped.astype(bool)
    if not stepped.any():
        return {"kl": None, "letter_kl": None, "clip_frac": None, "grad_norm": None, "ratio": None,
                "loss": None, "kl_per_adapter": None, "grad_steps": [0] * stepped.shape[0]}
    mean = lambda x: float(x[stepped].mean())
    kl_per = [float(m.kl[g][stepped[g]].mean()) if stepped[g].any() else None for g in range(stepped.shape[0])]
    return {
        "kl": mean(m.kl), "letter_kl": mean(m.letter_kl), "clip_frac": mean(m.clip_frac),
        "grad_norm": mean(m.grad_norm), "ratio": mean(m.ratio), "loss": mean(m.loss), "kl_per_adapter": kl_per,
        "ratio_first_step": [float(m.ratio[g, 0, 0]) for g in range(stepped.shape[0])],
        "grad_steps": stepped.sum(axis=(1, 2)).tolist(),
    }


class Trainer:
    """A PA-MAGRPO run, or a group of runs over several seeds: model, game, policy, optimizer and
    the jitted bank update."""

    def __init__(self, cfg: Config, model: Any = None, run_dir: str | Path | None = None, game: Any = None,
                 seeds: Sequence[int] | None = None, devices: Sequence[Any] | None = None):
        """`model` (an `omjax.models.load` result) and `game` (a `Game`) default to the ones the
        config names; passing them lets tests and notebooks reuse a loaded backbone.

        `seeds` (default: the config's one seed, in `run_dir` itself) trains one run per seed in
        `run_dir/seed_<s>`, each with the config's `seed` set to it; the game then runs
        `train.rollouts` x (number of seeds) episodes. `devices` (default: all) split the adapter
        bank and decision rows and hold the base, replicated or sharded as `run.base_sharding`
        says (`omjax.train.sharding`)."""
        self.run_dir = Path(run_dir or cfg.run.out_dir)
        self.grouped = seeds is not None
        self.seeds = [cfg.seed] if seeds is None else [int(s) for s in seeds]
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"seeds must be distinct integers >= 0, got {list(seeds or [])}")
        # A library sampled per seed becomes concrete in that seed's config, so its config.yaml and
        # library.json name it for eval; seeds that drew different libraries play one GroupGame.
        self.library_sampled = cfg.env.library == "sampled"
        self.run_dirs = [seed_dir(self.run_dir, s) for s in self.seeds] if self.grouped else [self.run_dir]
        self.seed_cfgs = [resolve_library(cfg)]
        if self.grouped:
            self.seed_cfgs = [resolve_library(dataclasses.replace(cfg, seed=s, run=dataclasses.replace(cfg.run,
                                                                                                      out_dir=str(d))))
                              for s, d in zip(self.seeds, self.run_dirs)]
        self.cfg = cfg if self.grouped else self.seed_cfgs[0]
        """The run's config; a group's keeps `env.library: sampled`, so its resume draws each seed's library again."""
        cfg = self.cfg
        dtype = jnp.float32 if cfg.model.dtype == "float32" else jnp.bfloat16
        model_cfg = model.config if model is not None else loader.load_config(cfg.model.name)
        self.placement, self.remat = self._plan(devices, model_cfg)
        """The device mesh, and `train.remat` resolved (True, False, or how many layers from the
        bottom the update recomputes)."""
        if model is None:
            # A base to be sharded is read into host memory first: it may not fit one device.
            host = staging_device() if self.placement.model_devices > 1 else None
            with jax.default_device(host):
                model = load(cfg.model.name, dtype=dtype)
        self.model = model
        self.lora_cfg = cfg.lora
        self.policy = make_policy(cfg, self.model, self.lora_cfg, self.remat)
        self.game = game if game is not None else make_group_game([c.env for c in self.seed_cfgs],
                                                                  cfg.policy.action_interface)
        self.decider = Decider(self.policy, self.model.tokenizer, cfg.policy)
        self.decider.placement = self.placement
        self.credit = make_credit(cfg, self.game)
        """The credit plug-in (`train.credit`): what each decision of a round is credited with."""
        self._cohort = self.credit if isinstance(self.credit, CohortCreditor) else CohortCreditor(cfg, self.game)
        """The paper's credit, which a frozen-base run's metrics rows report."""
        self.keep_trunk = (cfg.train.reuse_trunk and cfg.train.train and self.decider.letter_mode
                           and self.policy.keeps_trunk)
        """Whether training rollouts hand each decision's frozen trunk to the update
        (`train.reuse_trunk`, where the family and decision mode allow it)."""
        self.params = self.placement.base(self.model.params)
        """The frozen base on the devices (the model's own params on one device)."""
        t = cfg.train
        self.optimizer = make_optimizer(t.lr, t.max_grad_norm, t.adam_b1, t.adam_b2, t.adam_eps)
        settings = UpdateSettings(clip_eps=t.clip_eps, kl_coef=t.kl_coef, epochs=t.epochs,
                                  minibatch_size=t.minibatch_size, kl_kind=self.policy.kl_kind,
                                  objective=t.objective.kind)
        self._update_bar: tqdm | None = None
        self._in_sequence = jax.default_backend() == "cpu" and self.placement.n_devices == 1
        # The update's progress bar is fed by a host callback per gradient step; without a bar
        # the program carries none.
        on_step = (lambda: self._update_bar is not None and self._update_bar.update()) if cfg.run.progress else None
        self.update = make_bank_update(self.policy.policy_fn, self.optimizer, settings, self.policy.prepare,
                                       on_step=on_step, in_sequence=self._in_sequence)
        self._init = jax.jit(self._init_one)
        self.writes_files = jax.process_index() == 0
        """Whether this process writes the run's files besides checkpoints (in a multi-host run
        only the first does; every process takes part in each orbax checkpoint)."""
        self.round_compilations: list[int] = []
        """XLA compilations during each `round_group` call of this Trainer (0 once shapes repeat)."""

    def _plan(self, devices: Sequence[Any] | None, model_cfg: Any) -> tuple[Placement, bool | int]:
        """The mesh over `devices`, its model axis sized by `run.base_sharding` from the run's
        `memory_estimate` (counted whole on each device except the base, which splits), and the
        update's rematerialisation from the same plan (`oom.plan_estimate`)."""
        devices = list(jax.devices() if devices is None else devices)
        _, m, remat = plan_estimate(self.cfg, model_cfg, len(self.seeds), len(devices), device_memory(devices))
        return Placement(devices, model_devices=m), remat

    # ---------------------------------------------------------------------------------------
    def _init_one(self, seed):
        shapes = self.model.family.lora_shapes(self.model.config)
        key, k_lora = jax.random.split(jax.random.PRNGKey(seed))
        bank = lora_lib.init_lora(k_lora, shapes, self.lora_cfg, n_agents=self.cfg.n_adapters)
        return TrainState(bank=bank, opt_state=init_opt_state(self.optimizer, bank), key=key,
                          round=jnp.int32(0), best_return=jnp.float32(-jnp.inf), critic=self.credit.init_critic())

    def per_layer(self, bank: dict) -> dict:
        """`bank` in the per-layer list layout of checkpoints written before the layers were
        stacked (`Checkpointer.restore(..., per_layer=)` reads those through it)."""
        return {"layers": lora_lib.to_layers(bank, self.model.family.lora_shapes(self.model.config), agent_axis=True)}

    def init_states(self) -> list[TrainState]:
        """Per seed: fresh adapters (A from the seed, B zero), Adam state, RNG; one compiled program."""
        return [self._init(s) for s in self.seeds]

    def init_state(self) -> TrainState:
        """The fresh state of a single-seed run."""
        if len(self.seeds) != 1:
            raise ValueError(f"init_state() is for one seed; this group has {len(self.seeds)}: use init_states()")
        return self.init_states()[0]

    def round(self, state: TrainState) -> tuple[TrainState, dict, RolloutBatch]:
        """One round of Algorithm 1 for one seed; returns the new state, the metrics row and the rollouts."""
        states, rows, batches = self.round_group([state])
        return states[0], rows[0], batches[0]

    def round_group(self, states: list[TrainState]) -> tuple[list[TrainState], list[dict], list[RolloutBatch]]:
        """One round of Algorithm 1 for every seed at once (`states` in `self.seeds` order)."""
        cfg, r = self.cfg, int(states[0].round)
        n_seeds, a, k = len(states), cfg.n_adapters, cfg.train.rollouts
        if n_seeds != len(self.seeds) or any(int(st.round) != r for st in states):
            raise ValueError(f"round_group needs one state per seed ({len(self.seeds)}), all at one round")
        if cfg.train.train and cfg.policy.realign != 1.0:
            raise ValueError(f"policy.realign={cfg.policy.realign}: realigned draws are an evaluation rule, and a "
                             "training round's ratios score the policy itself; train with policy.realign=1")
        started: list[dict] = [{} for _ in states]
        if r == 0 and cfg.train.train:  # the credit's own start (e.g. a critic burn-in)
            states, started = map(list, zip(*[self.credit.start(seed, st) for seed, st in zip(self.seeds, states)]))
        c0, t0 = compilations(), time.time()
        splits = [jax.random.split(st.key, 3) for st in states]  # per seed: next key, rollouts, update
        bank = self.placement.bank(_stack([st.bank for st in states]))
        # Collect.
        try:
            batches = collect_group(self.game, self.decider, self.params, bank, k,
                                    jnp.stack([sp[1] for sp in splits]), self.seeds, r, a, progress=cfg.run.progress,
                                    keep_trunk=self.keep_trunk, snapshots=self.credit.snapshots and cfg.train.train,
                                    **self._segments(r))
        except RolloutWorkerError as err:
            raise RolloutWorkerError(f"round {r} of the run with seed{'s' if n_seeds > 1 else ''} "
                                     f"{', '.join(map(str, self.seeds))}: {err}") from err
        t1 = time.time()
        # Credit.
        if cfg.train.train:
            credited = [self.credit.assign(b, jax.random.fold_in(sp[1], 1), st.critic)
                        for b, sp, st in zip(batches, splits, states)]
        else:  # a frozen base: the paper's cohort advantages, for the metrics only
            credited = [self._cohort.assign(b, None, st.critic) for b, st in zip(batches, states)]
        will = [cfg.train.train and not c.zero and bool(b.decisions) for c, b in zip(credited, batches)]
        # Update.
        new_banks = [st.bank for st in states]
        new_opts = [st.opt_state for st in states]
        upds: list[dict] = [{} for _ in states]
        if any(will):
            shared = cfg.train.shared_lora
            # Decisions of every updating seed in one batch: rollout k of seed slot s becomes
            # s*K + k, its adapter row s*A + agent (s*A under a shared adapter).
            decisions = [dataclasses.replace(d, rollout=s * k + d.rollout)
                         for s, b in enumerate(batches) if will[s] for d in b.decisions]
            per_rollout = [c.advantages for s, c in enumerate(credited) if will[s]]
            dbatch = update_inputs(
                decisions, self.policy, self.decider,
                None if per_rollout[0] is None else np.concatenate(per_rollout), n_seeds * a,
                lambda d: (d.rollout // k) * a + (0 if shared else d.agent), cfg.train.minibatch_size,
                cfg.train.update_rows, cfg.train.update_tokens)
            valid = dbatch.valid
            dbatch = self.placement.split(dbatch)
            keys = jnp.concatenate([jax.random.split(sp[2], a) for sp in splits])
            active = active_minibatches(valid, cfg.train.minibatch_size)
            # In sequence every adapter of the bank reports each of its steps; vmapped, the bank
            # reports each step once.
            steps = active * (np.asarray(valid).shape[0] if self._in_sequence else 1)
            self._update_bar = tqdm(total=cfg.train.epochs * steps, desc=f"round {r} update", unit="step",
                                    leave=False, disable=not cfg.run.progress)
            try:
                out_bank, out_opt, metrics = self.update(
                    self.params, bank, self.placement.bank(_stack([st.opt_state for st in states])),
                    dbatch, self.placement.split(keys), active)
                wait_interruptibly(metrics)
            finally:
                self._update_bar.close()
                self._update_bar = None
            total = n_seeds * a
            for s in range(n_seeds):
                if will[s]:
                    new_banks[s] = _slot(out_bank, s, a, total)
                    new_opts[s] = _slot(out_opt, s, a, total)
                    upds[s] = summarize_update(_slot(metrics, s, a, total))
        t2 = time.time()
        self.round_compilations.append(compilations() - c0)
        out_states, rows = [], []
        for s, (st, b, c) in enumerate(zip(states, batches, credited)):
            row = self._row(r, b, c.per_rollout, c.zero, will[s], upds[s], st.best_return)
            row.update(c.row, **started[s])
            row.update(time_rollout_s=t1 - t0, time_update_s=t2 - t1, time_s=t2 - t0)
            best = row["best"]
            out_states.append(TrainState(bank=new_banks[s], opt_state=new_opts[s], key=splits[s][0],
                                         round=jnp.int32(r + 1), critic=c.critic,
                                         best_return=jnp.float32(row["team_return_mean"]) if best else st.best_return))
            rows.append(row)
        return out_states, rows, batches

    def _segments(self, r: int) -> dict:
        """`collect_group`'s segment arguments for round `r` (none under `train.segment=0`)."""
        seg = self.cfg.train.segment
        if not seg:
            return {}
        return {"starts": [segment_start(s, r, self.game.horizon, seg) for s in self.seeds], "steps": seg}

    def _row(self, r: int, batch: RolloutBatch, adv: np.ndarray, zero: bool, updated: bool, upd: dict,
             best_return: Any) -> dict:
        """One seed's metrics row of round `r` (timings are added by the caller); "deliveries"
        are the task units (deliveries, apples) the game counted in each rollout, apart from any
        progress bonus (`env.reward_shaping`) in the team return; "start" the env step the
        rollouts started at (`train.segment`)."""
        mean_return, units = float(np.mean(batch.returns)), batch.units
        return {
            "round": r,
            "start": batch.start,
            "team_returns": batch.returns.tolist(),
            "team_return_mean": mean_return,
            "team_return_std": float(np.std(batch.returns)),
            "deliveries": units.tolist(),
            "deliveries_mean": float(np.mean(units)),
            "shaping_bonus_mean": mean_return - float(np.mean(units)) * self.game.delivery_reward,
            "advantages": adv.tolist(),  # [K]
            "zero_spread": zero,
            "updated": bool(updated),
            "decisions_per_agent": batch.decision_counts().tolist(),
            "parse_failures_per_agent": batch.parse_failures().tolist(),
            "call_ratio": batch.call_ratio(),
            "kl": upd.get("kl"), "letter_kl": upd.get("letter_kl"), "clip_frac": upd.get("clip_frac"),
            "grad_norm": upd.get("grad_norm"), "ratio": upd.get("ratio"), "loss": upd.get("loss"),
            "kl_per_adapter": upd.get("kl_per_adapter"), "ratio_first_step": upd.get("ratio_first_step"),
            "grad_steps": upd.get("grad_steps"),
            "best": bool(np.float32(mean_return) > np.asarray(best_return)),
        }

    # ---------------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> list[dict]:
        """Train one seed to `train.rounds` (see `run_group`)."""
        if self.grouped:
            raise ValueError("this Trainer trains a group of seeds: use run_group()")
        return self.run_group(resume)[0]

    def run_group(self, resume: bool = False) -> list[list[dict]]:
        """Train every seed to `train.rounds` (metrics rows per seed); with `resume`, continue
        from the newest intact checkpoint (newer broken ones are reported and deleted), which
        every seed of a group must have reached. Ctrl-C abandons the current round and raises
        `RunInterrupted`: the rounds already written stay a consistent, resumable run."""
        cfg = self.cfg
        for d in self.run_dirs:
            d.mkdir(parents=True, exist_ok=True)
        ckpts = [Checkpointer(d, cfg.run.keep_checkpoints) for d in self.run_dirs]
        bar = None
        r = 0
        try:
            states = self.init_states()
            if resume:
                states = self._restore(ckpts, states)
            if self.writes_files:
                self._write_layout(resume)
            start = r = int(states[0].round)
            logs = [MetricsLog(d, start_round=start, write=self.writes_files) for d in self.run_dirs]
            bar = tqdm(range(start, cfg.train.rounds), initial=start, total=cfg.train.rounds, desc="PA-MAGRPO",
                       unit="round", disable=not cfg.run.progress)
            for r in bar:
                earned = states  # the adapters that collect this round's rollouts
                states, rows, batches = self.round_group(states)
                with deferred_sigint():
                    for d, ckpt, log, before, state, row, batch in zip(self.run_dirs, ckpts, logs, earned, states,
                                                                      rows, batches):
                        best = before.replace(best_return=state.best_return) if row["best"] else None
                        self._write_round(d, ckpt, log, state, best, row, batch, r)
                for seed, row in zip(self.seeds, rows):
                    kl = "-" if row["kl"] is None else f"{row['kl']:.4f}"
                    who = f"seed {seed} " if self.grouped else ""
                    tqdm.write(f"{who}round {r}: team return {row['team_return_mean']:.2f} "
                               f"{[round(x, 1) for x in row['team_returns']]} decisions {row['decisions_per_agent']} "
                               f"kl {kl} ({row['time_s']:.0f}s)")
                bar.set_postfix(ret=f"{np.mean([row['team_return_mean'] for row in rows]):.1f}")
        except KeyboardInterrupt as stop:
            raise RunInterrupted(self.run_dir, r, isinstance(stop, ComputationAbandoned)) from None
        finally:
            if bar is not None:
                bar.close()
            for c in ckpts:
                c.close()
        return [log.rows for log in logs]

    def _restore(self, ckpts: list[Checkpointer], states: list[TrainState]) -> list[TrainState]:
        """Every seed's newest intact checkpoint; all seeds of a group must stop at one round."""
        latest = {str(d): c.latest_round() for d, c in zip(self.run_dirs, ckpts)}
        missing = [d for d, step in latest.items() if step is None]
        if missing:
            raise FileNotFoundError(f"--resume: no finished checkpoint in "
                                    f"{', '.join(str(Path(d) / 'checkpoints') for d in missing)}")
        restored = [c.restore(st, per_layer=self.per_layer) for c, st in zip(ckpts, states)]
        steps = {str(d): rs.step for d, rs in zip(self.run_dirs, restored)}
        if len(set(steps.values())) > 1:
            raise FileNotFoundError(f"--resume: the seeds' runs stopped at different rounds {steps}")
        for c, rs in zip(ckpts, restored):
            for line in rs.skipped:
                print(f"skipped checkpoint {line}")
            c.discard(rs)
            print(f"resuming after round {rs.step} from {rs.path}")
        return [rs.state for rs in restored]

    def _write_layout(self, resume: bool) -> None:
        """Config and decisions folder of every seed's run directory; the group file of a group.
        A resumed run keeps its library record: its config names the library drawn, no longer the draw."""
        interface = self.cfg.policy.action_interface
        for d, c in zip(self.run_dirs, self.seed_cfgs):
            dump_config(c, d / "config.yaml")
            (d / "decisions").mkdir(exist_ok=True)
            # Native actions use no option library.
            if interface != "native" and not (resume and (d / LIBRARY_FILE).is_file()):
                guards = guards_file(c.env) if interface == "options" else ""
                write_library_record(d, library_record(c, self.library_sampled, guards))
        if self.grouped:
            dump_config(self.cfg, self.run_dir / "config.yaml")
            (self.run_dir / GROUP_FILE).write_text(json.dumps({"seeds": self.seeds}) + "\n")

    def _write_round(self, run_dir: Path, ckpt: Checkpointer, log: MetricsLog, state: TrainState,
                     best: TrainState | None, row: dict, batch: RolloutBatch, r: int) -> None:
        """Decisions, metrics row and checkpoint of round r; `best`, when this round scored the
        best return so far, is the state the round started from (saved as the best checkpoint)."""
        cfg = self.cfg
        if cfg.run.save_decisions and self.writes_files:
            write_decisions(run_dir, batch, r)
        log.append(row)
        if jax.process_count() > 1:
            # orbax saves from every process only arrays that span the whole mesh; the key and
            # counters live on one local device.
            state, best = self.placement.replicate(to_host((state, best)))
        ckpt.save(state, {"round": r + 1, "adapters_of_round": r, "metrics": row}, best=best)
        if self.writes_files and ((r + 1) % cfg.run.plot_every == 0 or r + 1 == cfg.train.rounds):
            plot_learning_curve(log.rows, run_dir / "learning_curve.png",
                                f"{cfg.env.game} {cfg.env.layout} / {cfg.model.name}")


class ComputationAbandoned(KeyboardInterrupt):
    """Ctrl-C while a dispatched XLA computation was still running (it cannot be cancelled)."""


def wait_interruptibly(tree: Any) -> None:
    """Block until every array of `tree` is computed, in short sleeps: Ctrl-C then stops the
    wait at once (a plain blocking read holds it for the whole update) and raises
    `ComputationAbandoned`."""
    try:
        for leaf in jax.tree.leaves(tree):
            while not leaf.is_ready():
                time.sleep(0.05)
    except KeyboardInterrupt:
        raise ComputationAbandoned from None


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: `round` was abandoned, rounds before it are saved in `run_dir`.
    `in_flight`: an XLA computation of the abandoned round is still running."""

    def __init__(self, run_dir: Path, round_idx: int, in_flight: bool = False):
        self.run_dir, self.round, self.in_flight = run_dir, round_idx, in_flight
        saved = f"rounds 0-{round_idx - 1} are saved" if round_idx else "no round was finished"
        super().__init__(f"interrupted in round {round_idx} ({saved} in {run_dir}); "
                         f"continue with: omjax train --resume {run_dir}")


@contextlib.contextmanager
def deferred_sigint():
    """Hold Ctrl-C until the block ends, so a round's decisions, metrics row and checkpoint are
    written together or not at all; the interrupt is raised as soon as the block exits."""
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt
