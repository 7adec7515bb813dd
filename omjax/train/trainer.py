"""PA-MAGRPO training rounds (Algorithm 1) with checkpoints, metrics and a learning curve.

    trainer = Trainer(load_config("configs/quickstart_overcooked_smollm2.yaml"))
    rows = trainer.run()            # or trainer.run(resume=True) to continue a killed run

One round: collect K joint rollouts under the current bank; normalise their team returns within
the cohort; take E PPO-clipped epochs per adapter over its own decisions (one jitted call,
vmapped over adapters); write metrics, decisions and a checkpoint.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from omjax.config import Config, LoRAConfig, dump_config
from omjax.envs.meltingpot.workers import RolloutWorkerError
from omjax.games import make_game
from omjax.models import load
from omjax.models import lora as lora_lib
from omjax.train import grpo
from omjax.train.checkpoint import Checkpointer, TrainState
from omjax.train.metrics import MetricsLog, plot_learning_curve, write_jsonl_atomic
from omjax.train.policy import LetterPolicy, SamplePolicy
from omjax.train.rollout import Decider, RolloutBatch, collect, decision_record, update_inputs
from omjax.train.update import (DecisionBatch, UpdateSettings, active_minibatches, init_opt_state, make_bank_update,
                                make_optimizer)


_advantages = jax.jit(grpo.group_advantages)


def stop_token_ids(tokenizer: Any) -> list[int]:
    """End-of-turn tokens that end a sampled reply."""
    ids = {tokenizer.eos_token_id}
    for name in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<turn|>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids.add(tid)
    return sorted(i for i in ids if i is not None)


def make_policy(cfg: Config, model: Any, lora_cfg: LoRAConfig) -> LetterPolicy | SamplePolicy:
    """The configured decision mode on `model`; with `lora.top_layers`, the layers below the
    adapters form a frozen trunk that the update computes once per round."""
    top = cfg.lora.top_layers
    frozen = model.config.num_layers - top if top else 0
    if cfg.policy.decision_mode == "letter":
        return LetterPolicy(model.family, model.config, lora_cfg.scale, cfg.policy.temperature,
                            remat=cfg.train.remat, frozen_layers=frozen)
    tok = model.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return SamplePolicy(model.family, model.config, lora_cfg.scale, cfg.policy.temperature,
                        cfg.policy.max_new_tokens, stop_token_ids(tok), pad, remat=cfg.train.remat,
                        frozen_layers=frozen)


def summarize_update(metrics: Any) -> dict:
    """Round-level update statistics from per-step metrics [G, E, n_mb] (stepped steps only)."""
    m = jax.tree.map(np.asarray, metrics)
    stepped = m.stepped.astype(bool)
    if not stepped.any():
        return {"kl": None, "clip_frac": None, "grad_norm": None, "ratio": None, "loss": None,
                "kl_per_adapter": None, "grad_steps": [0] * stepped.shape[0]}
    mean = lambda x: float(x[stepped].mean())
    kl_per = [float(m.kl[g][stepped[g]].mean()) if stepped[g].any() else None for g in range(stepped.shape[0])]
    return {
        "kl": mean(m.kl), "clip_frac": mean(m.clip_frac), "grad_norm": mean(m.grad_norm),
        "ratio": mean(m.ratio), "loss": mean(m.loss), "kl_per_adapter": kl_per,
        "ratio_first_step": [float(m.ratio[g, 0, 0]) for g in range(stepped.shape[0])],
        "grad_steps": stepped.sum(axis=(1, 2)).tolist(),
    }


class Trainer:
    """A PA-MAGRPO run: model, game, policy, optimizer and the jitted bank update."""

    def __init__(self, cfg: Config, model: Any = None, run_dir: str | Path | None = None, game: Any = None):
        """`model` (an `omjax.models.load` result) and `game` (a `Game`) default to the ones the
        config names; passing them lets tests and notebooks reuse a loaded backbone."""
        self.cfg = cfg
        self.run_dir = Path(run_dir or cfg.run.out_dir)
        dtype = jnp.float32 if cfg.model.dtype == "float32" else jnp.bfloat16
        self.model = model if model is not None else load(cfg.model.name, dtype=dtype)
        self.lora_cfg = cfg.lora
        self.policy = make_policy(cfg, self.model, self.lora_cfg)
        self.game = game if game is not None else make_game(cfg.env, cfg.policy.action_interface)
        self.decider = Decider(self.policy, self.model.tokenizer, cfg.policy)
        t = cfg.train
        self.optimizer = make_optimizer(t.lr, t.max_grad_norm, t.adam_b1, t.adam_b2, t.adam_eps)
        settings = UpdateSettings(clip_eps=t.clip_eps, kl_coef=t.kl_coef, epochs=t.epochs,
                                  minibatch_size=t.minibatch_size, kl_kind=self.policy.kl_kind)
        self._update_bar: tqdm | None = None
        self.update = make_bank_update(self.policy.policy_fn, self.optimizer, settings, self.policy.prepare,
                                       on_step=lambda: self._update_bar is not None and self._update_bar.update())

    # ---------------------------------------------------------------------------------------
    def init_state(self) -> TrainState:
        """Fresh adapters (A from the seed, B zero), Adam state, RNG; one compiled program."""
        shapes = self.model.family.lora_shapes(self.model.config)
        top = self.cfg.lora.top_layers
        if top:
            if top > len(shapes):
                raise ValueError(f"lora.top_layers={top} but the backbone has {len(shapes)} layers")
            shapes = [s if i >= len(shapes) - top else {} for i, s in enumerate(shapes)]

        def init(seed):
            key, k_lora = jax.random.split(jax.random.PRNGKey(seed))
            bank = lora_lib.init_lora(k_lora, shapes, self.lora_cfg, n_agents=self.cfg.n_adapters)
            return TrainState(bank=bank, opt_state=init_opt_state(self.optimizer, bank), key=key,
                              round=jnp.int32(0), best_return=jnp.float32(-jnp.inf))

        return jax.jit(init)(self.cfg.seed)

    def round(self, state: TrainState) -> tuple[TrainState, dict, RolloutBatch]:
        """One round of Algorithm 1; returns the new state, the metrics row and the rollouts."""
        cfg, r = self.cfg, int(state.round)
        key, k_roll, k_upd = jax.random.split(state.key, 3)
        t0 = time.time()
        try:
            batch = collect(self.game, self.decider, self.model.params, state.bank, cfg.train.rollouts, k_roll,
                            cfg.seed, r, progress=cfg.run.progress)
        except RolloutWorkerError as err:
            raise RolloutWorkerError(f"round {r} of the run with seed {cfg.seed}: {err}") from err
        t1 = time.time()
        adv, zero = _advantages(jnp.asarray(batch.returns, jnp.float32))
        adv, zero = np.asarray(adv), bool(zero)
        bank, opt_state = state.bank, state.opt_state
        upd: dict = {}
        will_update = cfg.train.train and not zero and batch.decisions
        if will_update:
            shared = cfg.train.shared_lora
            inputs, adv_rows, valid = update_inputs(
                batch.decisions, self.policy, self.decider, adv, cfg.n_adapters,
                (lambda d: 0) if shared else (lambda d: d.agent), cfg.train.minibatch_size,
                cfg.train.update_rows, cfg.train.update_tokens)
            dbatch = DecisionBatch(inputs=jax.tree.map(jnp.asarray, inputs), advantage=jnp.asarray(adv_rows),
                                   valid=jnp.asarray(valid))
            keys = jax.random.split(k_upd, cfg.n_adapters)
            active = active_minibatches(valid, cfg.train.minibatch_size)
            self._update_bar = tqdm(total=cfg.train.epochs * active, desc=f"round {r} update", unit="step",
                                    leave=False, disable=not cfg.run.progress)
            try:
                bank, opt_state, metrics = self.update(self.model.params, bank, opt_state, dbatch, keys, active)
                wait_interruptibly(metrics)
            finally:
                self._update_bar.close()
                self._update_bar = None
            upd = summarize_update(metrics)
        t2 = time.time()
        mean_return = float(np.mean(batch.returns))
        best = bool(np.float32(mean_return) > np.asarray(state.best_return))
        row = {
            "round": r,
            "team_returns": batch.returns.tolist(),
            "team_return_mean": mean_return,
            "team_return_std": float(np.std(batch.returns)),
            "deliveries_mean": mean_return / self.game.delivery_reward if self.game.delivery_reward else None,
            "advantages": adv.tolist(),
            "zero_spread": zero,
            "updated": bool(will_update),
            "decisions_per_agent": batch.decision_counts().tolist(),
            "parse_failures_per_agent": batch.parse_failures().tolist(),
            "call_ratio": batch.call_ratio(),
            "kl": upd.get("kl"), "clip_frac": upd.get("clip_frac"), "grad_norm": upd.get("grad_norm"),
            "ratio": upd.get("ratio"), "loss": upd.get("loss"), "kl_per_adapter": upd.get("kl_per_adapter"),
            "ratio_first_step": upd.get("ratio_first_step"), "grad_steps": upd.get("grad_steps"),
            "best": best,
            "time_rollout_s": t1 - t0, "time_update_s": t2 - t1, "time_s": t2 - t0,
        }
        new_best = jnp.float32(mean_return) if best else state.best_return
        state = TrainState(bank=bank, opt_state=opt_state, key=key, round=jnp.int32(r + 1), best_return=new_best)
        return state, row, batch

    # ---------------------------------------------------------------------------------------
    def run(self, resume: bool = False) -> list[dict]:
        """Train to `train.rounds`; with `resume`, continue from the newest intact checkpoint
        (newer broken ones are reported and deleted). Ctrl-C abandons the current round and
        raises `RunInterrupted`: the rounds already written stay a consistent, resumable run."""
        cfg = self.cfg
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ckpt = Checkpointer(self.run_dir, cfg.run.keep_checkpoints)
        state = self.init_state()
        if resume:
            if ckpt.latest_round() is None:
                ckpt.close()
                raise FileNotFoundError(f"--resume: no finished checkpoint in {self.run_dir / 'checkpoints'}")
            try:
                restored = ckpt.restore(state)
            except BaseException:
                ckpt.close()
                raise
            for line in restored.skipped:
                print(f"skipped checkpoint {line}")
            ckpt.discard(restored)
            state = restored.state
            print(f"resuming after round {restored.step} from {restored.path}")
        dump_config(cfg, self.run_dir / "config.yaml")
        log = MetricsLog(self.run_dir, start_round=int(state.round))
        (self.run_dir / "decisions").mkdir(exist_ok=True)
        start = int(state.round)
        bar = tqdm(range(start, cfg.train.rounds), initial=start, total=cfg.train.rounds, desc="PA-MAGRPO",
                   unit="round", disable=not cfg.run.progress)
        r = start
        try:
            for r in bar:
                state, row, batch = self.round(state)
                with deferred_sigint():
                    if cfg.run.save_decisions:
                        write_jsonl_atomic(self.run_dir / "decisions" / f"round_{r:04d}.jsonl",
                                           [decision_record(d, r) for d in batch.decisions])
                    log.append(row)
                    ckpt.save(state, {"round": r + 1, "metrics": row}, is_best=row["best"])
                    if (r + 1) % cfg.run.plot_every == 0 or r + 1 == cfg.train.rounds:
                        plot_learning_curve(log.rows, self.run_dir / "learning_curve.png",
                                            f"{cfg.env.game} {cfg.env.layout} / {cfg.model.name}")
                kl = "-" if row["kl"] is None else f"{row['kl']:.4f}"
                tqdm.write(f"round {r}: team return {row['team_return_mean']:.2f} "
                           f"{[round(x, 1) for x in row['team_returns']]} decisions {row['decisions_per_agent']} "
                           f"kl {kl} ({row['time_s']:.0f}s)")
                bar.set_postfix(ret=f"{row['team_return_mean']:.1f}")
        except KeyboardInterrupt as stop:
            raise RunInterrupted(self.run_dir, r, isinstance(stop, ComputationAbandoned)) from None
        finally:
            bar.close()
            ckpt.close()
        return log.rows


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
