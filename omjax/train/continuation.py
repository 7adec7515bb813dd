"""Action values under uniform-random continuation, for Overcooked option decisions.

`train.credit: {kind: continuation}` (not in the paper; docs/departures.md) credits each decision with
its own advantage under the uniform menu policy instead of its rollout's team return:

    A(s, a) = Q_u(s, a) - V_u(s),   V_u(s) = mean of Q_u(s, o) over the options o the menu shows,

where Q_u(s, a) is the team return of the next `horizon` env steps when the deciding agent starts
option a in the decision's state s and every later pick of every agent is uniform over its
guard-filtered menu (the agents' running options run on). It is estimated from `rollouts`
simulated continuations per option in the JAX executor, the same random streams for every option
of a decision (common random numbers), so the options' estimates differ by what the option does
more than by the streams. A policy that puts more weight than uniform on options with A > 0 in
every state does at least as well as uniform picks over the window (policy improvement); a
frozen base that reads letters, not labels, picks roughly uniformly under the per-decision letter
shuffle (`experiments/lab/menu_policies.py`).

No LLM runs in a continuation: a decision's values cost `menu size x rollouts x horizon` env
steps of the jitted, vmapped executor (`estimate`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from omjax.config import CRITIC_KEYS
from omjax.options.menu import GuardTable
from omjax.options.overcooked import SCHEMA

#: Candidate options scored per decision (menus are padded or cut to this many).
MAX_OPTIONS = 16


class UniformQ:
    """Q_u of every option on a decision's menu, for an Overcooked option-menu game.

    `estimate(snapshots, agents, key)` scores a batch of D decisions: `snapshots` the game's
    (env state, executor state) at each decision (`Game.snapshot`), `agents` int [D] who decides.
    Returns (q float [D, I] (0 where not shown), shown bool [D, I]) over the library's I instances.
    """

    def __init__(self, game, horizon: int, rollouts: int):
        if horizon < 1 or rollouts < 1:
            raise ValueError(f"the continuation credit needs horizon >= 1 and rollouts >= 1, got {horizon}, {rollouts}")
        if getattr(game, "game", None) != "overcooked" or not hasattr(game, "lib") or not hasattr(game, "guards"):
            raise ValueError("train.credit.kind=continuation needs an Overcooked option-menu game "
                             f"(policy.action_interface=options), got {type(game).__name__}")
        self.game, self.horizon, self.rollouts = game, int(horizon), int(rollouts)
        self.lib = game.lib
        self.table = GuardTable.from_guards(SCHEMA, game.guards)
        self._estimate = jax.jit(self._build())

    def _build(self):
        lib, table, game = self.lib, self.table, self.game
        n_agents, horizon, end = lib.num_agents, self.horizon, game.horizon
        active = jnp.asarray(game.active)
        ids = jnp.arange(n_agents)

        def continuation(state, ex, agent, first, key):
            """Team return of `horizon` steps (cut at the episode's end) when `agent` starts `first`."""

            def body(carry, key_t):
                state, ex, t = carry
                hidden = lib.hidden_mask(table, state)  # [A, I]
                draw = jax.random.uniform(key_t, hidden.shape)
                pick = jnp.argmax(jnp.where(hidden, -1.0, draw), axis=-1).astype(jnp.int32)  # [A]
                choice = jnp.where((t == 0) & (ids == agent), first, pick)
                live = state.time < end
                state, ex, _, sparse, shaped = lib.option_step(state, ex, choice, active)
                return (state, ex, t + 1), jnp.where(live, game.team_reward(sparse, shaped), 0.0)

            _, rewards = jax.lax.scan(body, (state, ex, 0), jax.random.split(key, horizon))
            return jnp.sum(rewards)

        def one(state, ex, agent, key):
            shown = ~lib.hidden_mask(table, state)[agent]  # [I]
            cand = jnp.argsort(~shown, stable=True)[:MAX_OPTIONS].astype(jnp.int32)  # shown first
            keys = jax.random.split(key, self.rollouts)  # [M], shared by every option (CRN)
            q = jax.vmap(lambda c: jax.vmap(lambda k: continuation(state, ex, agent, c, k))(keys).mean())(cand)
            q_all = jnp.zeros(shown.shape).at[cand].set(jnp.where(shown[cand], q, 0.0))
            return q_all, shown

        return jax.vmap(one)

    def estimate(self, snapshots: list, agents, key, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """(q [D, I], shown [D, I]) of D decisions (class docstring), `chunk` at a time."""
        return self.estimate_keyed(snapshots, agents, row_keys(key, len(agents), chunk), chunk)

    def estimate_keyed(self, snapshots: list, agents, keys: jax.Array,
                       chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """`estimate` with each decision's own key (`keys` [D, 2], host or device; `row_keys` gives the ones
        `estimate` draws), so decisions gathered from several calls can be scored in one: a
        decision's value depends on its snapshot, agent and key only, whichever rows share its
        batch (the continuation rewards are small integers, summed and averaged exactly)."""
        states, execs = (jax.tree.map(lambda *xs: np.stack(xs), *[snap[j] for snap in snapshots]) for j in (0, 1))
        agents = np.asarray(agents, np.int32)
        qs, shown = [], []
        for lo in range(0, len(agents), chunk):
            part = slice(lo, lo + chunk)
            q, sh = self._chunk(jax.tree.map(lambda x: x[part], states), jax.tree.map(lambda x: x[part], execs),
                                agents[part], keys[part])
            qs.append(q)
            shown.append(sh)
        q, shown = np.concatenate(qs), np.concatenate(shown)
        if shown.sum(axis=1).max(initial=0) > MAX_OPTIONS:
            raise ValueError(f"a menu shows {shown.sum(axis=1).max()} options; the continuation credit scores at most {MAX_OPTIONS}")
        return q, shown

    def _chunk(self, states, execs, agents, keys):
        n = len(agents)
        width = _width(n)  # padded to a power of two: few compilations
        pad = lambda x: jnp.concatenate([x, jnp.repeat(x[:1], width - n, axis=0)]) if width > n else jnp.asarray(x)
        q, shown = self._estimate(jax.tree.map(pad, states), jax.tree.map(pad, execs), pad(jnp.asarray(agents)),
                                  pad(keys))
        return np.asarray(q)[:n], np.asarray(shown)[:n]


def _width(n: int) -> int:
    """Rows of the compiled estimate that scores n decisions: a power of two, at least 8."""
    return max(8, 1 << (n - 1).bit_length())


def row_keys(key: jax.Array, n: int, chunk: int = 256) -> jax.Array:
    """[n, 2] the per-decision keys `UniformQ.estimate(..., key, chunk)` scores n decisions
    with: chunk `lo`'s rows take the first ones of `split(fold_in(key, lo), width)`."""
    parts = [jax.random.split(jax.random.fold_in(key, lo), _width(min(chunk, n - lo)))[:min(chunk, n - lo)]
             for lo in range(0, n, chunk)]
    return jnp.concatenate(parts) if parts else jnp.zeros((0, 2), jnp.uint32)


def baseline(q: np.ndarray, shown: np.ndarray) -> np.ndarray:
    """[D] V_u(s): the mean of Q_u over the options each decision's menu shows (q, shown [D, I])."""
    q, shown = np.asarray(q, np.float64), np.asarray(shown, bool)
    return (q * shown).sum(axis=1) / np.maximum(shown.sum(axis=1), 1)


def entry_labels(q: np.ndarray) -> np.ndarray:
    """[n] the value label Q_u(s, a) - V_u(s) of each of a menu's n entries, from their Q_u [n]
    (the module docstring); it sums to zero over the menu, and a one-entry menu is 0."""
    q = np.asarray(q, np.float64)
    return np.zeros(len(q)) if len(q) < 2 else q - q.mean()


def name_stats(names: list[list[str]], labels: list[np.ndarray], order: Sequence[str]) -> np.ndarray:
    """The sufficient statistics of the critic over names (`name_weights`): per name of `order`,
    the count, sum and sum of squares of its entries' labels, float64 [len(order), 3]. Adding two
    sets' statistics gives those of their union (the continuation credit's pooled critic).

    Args: as `name_weights`; `order` lists every name a menu may hold (a name outside it is an error).
    """
    index = {n: i for i, n in enumerate(order)}
    stats = np.zeros((len(order), 3))
    for ns, lab in zip(names, labels):
        if len(ns) > 1:
            for n, a in zip(ns, lab):
                if n not in index:
                    raise ValueError(f"option {n!r} is not one of the critic's names {', '.join(order)}")
                stats[index[n]] += (1.0, float(a), float(a) ** 2)
    return stats


def weights_from_stats(stats: np.ndarray, order: Sequence[str]) -> tuple[dict[str, float], float, float]:
    """`name_weights` from `name_stats` float [N, 3]: ({name: mean label / sd}, R^2, sd), over
    the names with at least one label."""
    count, total, squares = np.asarray(stats, np.float64).T  # [N] each
    if count.sum() == 0:
        raise ValueError("the critic over names holds no label: no decision offered two options")
    mean = total.sum() / count.sum()
    sd = float(np.sqrt(max(squares.sum() / count.sum() - mean ** 2, 0.0)))
    seen = count > 0
    within = (squares[seen] - total[seen] ** 2 / count[seen]).sum() / count.sum()  # within-name variance
    r2 = 1.0 - float(within) / sd ** 2 if sd > 0 else 0.0
    return {n: float(total[i] / count[i]) / (sd or 1.0) for i, n in enumerate(order) if seen[i]}, r2, sd


def name_weights(names: list[list[str]], labels: list[np.ndarray]) -> tuple[dict[str, float], float, float]:
    """A tabular critic over option names: the mean label of each name over a set of decisions,
    in units of the sd of all their labels (the continuation credit; `experiments/lab/menu_policies.py`
    `name_soft`).

    Args:
      names: per decision, its menu's option names [n_d].
      labels: per decision, its entries' labels [n_d] (`entry_labels`); decisions whose menu has
        one entry carry none and are left out.
    Returns:
      ({name: weight}, R^2 the share of the labels' variance the names explain, sd of the labels).
    """
    order = sorted({n for ns in names if len(ns) > 1 for n in ns})
    if not order:
        raise ValueError(f"none of the {len(names)} decisions offered two options: no name has a label")
    return weights_from_stats(name_stats(names, labels, order), order)


_KEY_SEP = "|"


def _check_keys(by: str) -> None:
    if by not in CRITIC_KEYS:
        raise ValueError(f"unknown critic key {by!r}; known: {', '.join(CRITIC_KEYS)}")


def entry_keys(lib, state, agent: int, menu, by: str = "name") -> list[str]:
    """The key each entry of `agent`'s `menu` in env `state` is credited under by the critic over
    names (`name_weights` works on any string keys): "name" its option name; "state" the option
    name with the entry's read-set features at the decision (the guard-eligible, deterministic
    `held`, `tgt_pot_state` and `tgt_item` of `lib.read_features`), e.g.
    `start_cooking|onion|full|na`, so that starting a pot of 3 onions and one of 1 are credited
    apart while the critic stays a table pooled over decisions."""
    _check_keys(by)
    if by == "name":
        return [it.opt for it in menu]
    v = lib.view(np, jax.tree.map(np.asarray, state))
    inst = np.array([it.index for it in menu], np.int32)
    feats = lib.read_features(np, v, np.full(len(inst), agent, np.int32), inst)  # [n, F]
    return [_KEY_SEP.join([it.opt, *(f.values[int(x)] for f, x in zip(SCHEMA.read_set, row))])
            for it, row in zip(menu, feats)]


@functools.lru_cache(maxsize=None)
def key_order(option_names: tuple[str, ...], by: str = "name") -> tuple[str, ...]:
    """Every key `entry_keys(..., by)` may give for a library's options, in a fixed order (the rows
    of the pooled critic's statistics, `TrainState.critic`; cached: the trainer asks every round)."""
    _check_keys(by)
    if by == "name":
        return tuple(option_names)
    combos = [()]
    for f in SCHEMA.read_set:
        combos = [c + (v,) for c in combos for v in f.values]
    return tuple(_KEY_SEP.join((n, *c)) for n in option_names for c in combos)


def uniform_menus(game, q_values: UniformQ, seeds: Sequence[int],
                  by: str = "name") -> list[tuple[list[str], np.ndarray]]:
    """A uniform-over-menu burn-in for the critic over names (`train.credit.burnin`;
    `experiments/lab/menu_policies.py` fits `name_soft` on it): one full episode of `game` per seed,
    all stepped together, every agent picking uniformly over its guard-filtered menu (letters
    shuffled from `default_rng([seed, agent])`, picks from `default_rng([seed, 2**20])`). Returns,
    per decision whose menu offers two options or more, its entries' keys (`entry_keys(..., by)`)
    and their Q_u from `q_values` [len(menu)]: the values `q_values.estimate` gives all of step
    t's decisions under `fold_in(PRNGKey(seeds[0]), t)`, scored in one batch after the episodes."""
    _check_keys(by)
    seeds = [int(s) for s in seeds]
    n = game.n_agents
    game.reset(seeds)
    letters = [[np.random.default_rng([s, i]) for i in range(n)] for s in seeds]
    picks = [np.random.default_rng([s, 1 << 20]) for s in seeds]
    choices = np.zeros((len(seeds), n), np.int32)
    # The picks are uniform, so no pick waits on a value: every labelled decision is gathered
    # first, with the key `estimate` would have given it at its step, and all are scored at once
    # (~2,000 decisions in 8 calls of 256 rows instead of one call per step of at most 32).
    snaps, agents, keys, menus = [], [], [], []
    for t in range(game.horizon):
        pending = [(int(k), int(i)) for k, i in np.argwhere(game.needs_decision())]
        step_keys = np.asarray(row_keys(jax.random.fold_in(jax.random.PRNGKey(seeds[0]), t), len(pending)))  # [D, 2]
        for j, (k, i) in enumerate(pending):
            menu = game.menu(k, i, letters[k][i])
            if len(menu) > 1:
                snap = game.snapshot(k)
                snaps.append(snap)
                agents.append(i)
                keys.append(step_keys[j])
                menus.append((entry_keys(game.lib, snap[0], i, menu, by), [it.index for it in menu]))
            choices[k, i] = menu[int(picks[k].integers(len(menu)))].index
        game.step(choices)
    if not snaps:
        return []
    q, _ = q_values.estimate_keyed(snaps, agents, np.stack(keys))  # [D, I]
    return [(names, q[j][index]) for j, (names, index) in enumerate(menus)]


def tilted_weight(p: np.ndarray, w: np.ndarray, beta: float) -> float:
    """sum_j q_j w_j for q proportional to p_j exp(beta w_j) over one menu (p, w [M]): the
    expected weight under the regularised optimum of a policy `p` tilted by the critic's weights
    at beta = 1 / kl_coef (`name_soft` of `experiments/lab/menu_policies.py` where p is uniform)."""
    w = np.asarray(w, np.float64)
    q = np.asarray(p, np.float64) * np.exp(beta * (w - w.max()))
    return float(q / q.sum() @ w)


def name_credit(names: Sequence[str], weights: dict[str, float]) -> np.ndarray:
    """Each entry's credit under the critic over names: its name's weight less the menu's mean
    ([len(names)]; zeros for a one-entry menu, where there is no choice to credit)."""
    if len(names) < 2:
        return np.zeros(len(names))
    missing = sorted(set(names) - set(weights))
    if missing:
        raise ValueError(f"the critic over names has no weight for {', '.join(missing)}")
    w = np.array([weights[n] for n in names])
    return w - w.mean()
