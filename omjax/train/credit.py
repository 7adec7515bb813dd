"""Credit assignment plug-ins: what each decision of a round is credited with before the update.

A round of PA-MAGRPO reads as collect -> credit -> update (`omjax.train.trainer`). The credit
step is one object built from the run's `train.credit` settings (`make_credit`):

    credit = make_credit(cfg, game)
    state = credit.start(seed, state)              # once, before round 0 (e.g. a critic burn-in)
    out = credit.assign(batch, key, state.critic)  # every round: a `Credited`

Two kinds ship. `cohort` is the paper's (Algorithm 1): every decision carries its rollout's
cohort-normalised team return. `continuation` (not in the paper; docs/departures.md) credits each
decision by a pooled critic over its menu's entries, learned from simulated continuations of the
uniform menu policy (`omjax.train.continuation`), and also gives every entry's advantage, which
the `target` objective (`omjax.train.objectives`) needs.

A new kind is a settings dataclass with a `kind` field and a class with the methods below,
registered with `register_credit`; it is then selected by `train.credit: {kind: <name>, ...}`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from omjax.config import CREDITS, Config, ContinuationCredit
from omjax.train import continuation, grpo
from omjax.train.checkpoint import TrainState
from omjax.train.rollout import RolloutBatch, burnin_seed

_cohort_advantages = jax.jit(grpo.group_advantages)


@dataclasses.dataclass
class Credited:
    """One seed's round, credited."""

    advantages: np.ndarray | None
    """[K] one advantage per rollout (`update_inputs` gives each decision its rollout's), or
    None when every decision carries its own (`Decision.advantage`)."""
    per_rollout: np.ndarray
    """[K] the mean advantage of each rollout's decisions (the metrics row's `advantages`)."""
    zero: bool
    """Whether every advantage is zero (the round has no spread: no update)."""
    row: dict = dataclasses.field(default_factory=dict)
    """Extra fields of the round's metrics row."""
    critic: jax.Array | None = None
    """`TrainState.critic` after the round."""


class CohortCreditor:
    """`train.credit: {kind: cohort}`, the paper's: each decision's advantage is its rollout's
    team return normalised over the K rollouts (`grpo.group_advantages`)."""

    snapshots = False
    """Whether the rollouts must keep each decision's env state (`Decision.snapshot`)."""
    per_entry = False
    """Whether each decision also carries every menu entry's advantage (`Decision.option_advantages`)."""

    def __init__(self, cfg: Config, game: Any):
        del cfg, game

    def init_critic(self) -> jax.Array | None:
        """The critic statistics a fresh `TrainState` starts from (None: no critic)."""
        return None

    def start(self, seed: int, state: TrainState) -> tuple[TrainState, dict]:
        """Round-0 `state` of training seed `seed` before its first collection, and the round-0
        metrics fields this adds."""
        del seed
        return state, {}

    def assign(self, batch: RolloutBatch, key: jax.Array, critic: jax.Array | None) -> Credited:
        del key
        adv, zero = _cohort_advantages(jnp.asarray(batch.returns, jnp.float32))  # [K]
        adv = np.asarray(adv)
        return Credited(adv, adv, bool(zero), critic=critic)


class ContinuationCreditor:
    """`train.credit: {kind: continuation, ...}` (`config.ContinuationCredit`): the pooled critic
    over menu-entry keys, fitted to the value labels Q_u(s, a) - V_u(s) of uniform-policy
    continuations (`continuation.UniformQ`), started from `burnin` uniform-pick episodes."""

    snapshots = True
    per_entry = True

    def __init__(self, cfg: Config, game: Any):
        self.settings: ContinuationCredit = cfg.train.credit
        self.q_values = continuation.UniformQ(game, self.settings.horizon, self.settings.rollouts)
        self.game = game
        self.order = continuation.key_order(self.q_values.lib.schema.option_names, self.settings.keys)
        """The critic's rows: every key an entry can have, in a fixed order."""
        self._burnin: dict[int, tuple[np.ndarray, int]] = {}
        """Per seed: its burn-in's critic statistics [n_keys, 3] and labelled decisions (played once)."""

    def init_critic(self) -> jax.Array:
        return jnp.zeros((len(self.order), 3), jnp.float32)

    def start(self, seed: int, state: TrainState) -> tuple[TrainState, dict]:
        """The critic's statistics set to the value labels of the seed's burn-in episodes
        (`continuation.uniform_menus` on seeds `burnin_seed(seed, 0..n-1)`); the round-0 metrics
        get `critic_burnin` (episodes, labelled decisions, keys seen, the share of the labels'
        variance the critic explains)."""
        n = self.settings.burnin
        if not n:
            return state, {}
        if seed not in self._burnin:
            menus = continuation.uniform_menus(self.game, self.q_values, [burnin_seed(seed, j) for j in range(n)],
                                               self.settings.keys)  # per labelled decision: (keys, Q_u) [len(menu)]
            if not menus:
                raise ValueError(f"train.credit.burnin: no decision of the {n} burn-in episodes offered two options")
            labels = [continuation.entry_labels(q) for _, q in menus]
            self._burnin[seed] = (continuation.name_stats([ks for ks, _ in menus], labels, self.order), len(menus))
        stats, decisions = self._burnin[seed]
        weights, r2, _ = continuation.weights_from_stats(stats, self.order)
        return (state.replace(critic=jnp.asarray(stats, jnp.float32)),
                {"critic_burnin": {"episodes": n, "decisions": decisions, "keys": len(weights), "r2": r2}})

    def assign(self, batch: RolloutBatch, key: jax.Array, critic: jax.Array) -> Credited:
        """Sets each decision's `advantage` to its picked entry's credit and `option_advantages`
        to every entry's (`continuation.name_credit`: the key's weight less the menu's mean, in
        units of the value labels' sd), with the round's labels added to `critic`. The row gets
        the picked entries' mean credit (0 for uniform picks; it rises as the policy prefers what
        the critic rates), their sd, the critic's weights, the share of the labels' variance it
        explains and the labels' sd."""
        ds, k = batch.decisions, len(batch.returns)
        if not ds:
            return Credited(None, np.zeros(k), True, {"q_adv_mean": None, "q_adv_sd": None}, critic)
        q, _ = self.q_values.estimate([d.snapshot for d in ds], [d.agent for d in ds], key)  # [D, I]
        labels = [continuation.entry_labels(q[j, [it.index for it in d.menu]]) for j, d in enumerate(ds)]  # D x [M]
        keys = [continuation.entry_keys(self.q_values.lib, d.snapshot[0], d.agent, d.menu, self.settings.keys)
                for d in ds]  # D x [M] the critic's key of each entry
        extra = {}
        for d, ks in zip(ds, keys):
            d.keys = ks
        if any(len(ks) > 1 for ks in keys):
            stats = np.asarray(critic, np.float64) + continuation.name_stats(keys, labels, self.order)  # [N, 3]
            critic = jnp.asarray(stats, jnp.float32)
            weights, r2, label_sd = continuation.weights_from_stats(stats, self.order)
            labels = [continuation.name_credit(ks, weights) for ks in keys]
            extra = {"q_name_weights": weights, "q_name_r2": r2, "q_label_sd": label_sd}
        raw = np.array([lab[d.action] for lab, d in zip(labels, ds)])  # [D]
        sd = float(np.std(raw))
        zero = sd <= grpo.ZERO_SPREAD_TOL
        scale = 0.0 if zero else 1.0
        for d, lab, a in zip(ds, labels, raw):
            d.advantage = float(a * scale)
            d.option_advantages = (lab * scale).astype(np.float32)
        rollout = [d.rollout for d in ds]
        per_rollout = (np.bincount(rollout, weights=[d.advantage for d in ds], minlength=k)
                       / np.maximum(np.bincount(rollout, minlength=k), 1))  # [K]
        return Credited(None, per_rollout, zero, {"q_adv_mean": float(np.mean(raw)), "q_adv_sd": sd, **extra}, critic)


CREDITORS: dict[str, Callable[[Config, Any], Any]] = {"cohort": CohortCreditor, "continuation": ContinuationCreditor}
"""`train.credit.kind` -> the class that credits a round."""


def register_credit(kind: str, settings: type, creditor: Callable[[Config, Any], Any]) -> None:
    """Add a credit kind: `settings`, a frozen dataclass whose `kind` field defaults to `kind`
    (the `train.credit` section), and `creditor(cfg, game)`, an object with `snapshots`,
    `per_entry`, `init_critic()`, `start(seed, state)` and `assign(batch, key, critic)` as
    `CohortCreditor` has."""
    if kind in CREDITORS:
        raise ValueError(f"credit kind {kind!r} is already registered")
    CREDITS[kind] = settings
    CREDITORS[kind] = creditor


def make_credit(cfg: Config, game: Any):
    """The creditor `cfg.train.credit` selects, for `game`."""
    return CREDITORS[cfg.train.credit.kind](cfg, game)
