"""Held-out episodes of a team of adapters or of the frozen base, and their summary (paper §6.2).

`evaluate` plays one episode per seed through a trainer's decision path and returns one plain row
per episode; `load_or_play` keeps those rows in a jsonl file and plays only the batches it lacks,
so a stopped evaluation resumes; `summarize` and `compare` turn the rows into bootstrap CIs and a
two-sided Mann-Whitney U test. Scores are the env's own task events (`Game.agent_returns`: soups
delivered, apples eaten), never the shaped training reward, which is kept as a secondary.

One row per episode:

    seed, horizon          the held-out seed (>= 10000 by convention) and the episode's length
    units, agent_units     real task events, the team's sum and per agent [A]
    shaped_return          the team's training reward over the episode (the secondary)
    patches_alive          patches alive at the end (Commons Harvest), else None
    choices                every decision, {"aid": agent, "opt": option name}, in play order
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from omjax.eval.audits import macro_counts
from omjax.eval.stats import bootstrap_ci, mann_whitney
from omjax.train.metrics import read_jsonl, write_jsonl_atomic
from omjax.train.rollout import collect


def evaluate(trainer, bank, seeds: Sequence[int], batch: int) -> list[dict]:
    """One episode per seed of `trainer`'s game and policy under `bank` (a zero bank, B = 0, is
    the frozen base), `batch` episodes per rollout call, each batch keyed by its first seed:
    the same seeds in the same batches replay the same episodes."""
    game, out = trainer.game, []
    # A bank restored from a checkpoint is committed to its device, a fresh one is not: as jit
    # arguments they are different programs, so the bank goes in as a fresh array either way.
    bank = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)), bank)
    seeds = list(seeds)
    for lo in range(0, len(seeds), batch):
        chunk = seeds[lo: lo + batch]
        rollouts = collect(game, trainer.decider, trainer.model.params, bank, len(chunk),
                           jax.random.PRNGKey(chunk[0]), chunk[0], 0, episodes=chunk)
        units = game.agent_returns()  # [k, A]
        patches = game.extras().get("patches_alive")  # [k] Commons Harvest only
        for k, seed in enumerate(chunk):
            mine = [d for d in rollouts.decisions if d.rollout == k]
            out.append({
                "seed": seed, "horizon": game.horizon, "units": float(units[k].sum()),
                "agent_units": units[k].tolist(),
                "shaped_return": float(rollouts.returns[k]),
                "patches_alive": None if patches is None else int(patches[k]),
                "choices": [{"aid": d.agent, "opt": d.menu[d.action].opt} for d in mine],
            })
    return out


def load_or_play(path: Path, seeds: Sequence[int], batch: int,
                 play: Callable[[list[int]], list[dict]] | None) -> list[dict]:
    """The episodes of `seeds` from `path` (jsonl), in seed order. Seeds go in the batches
    `evaluate` plays them in (`batch` seeds from the first: an episode's letter and pick streams
    depend on its batch); a batch missing any seed is played whole by `play(chunk)` and saved,
    atomically with every episode already there, before the next. So a stopped evaluation
    resumes and a longer seed list plays only its new batches; `play=None` plays nothing and
    returns the seeds that are there."""
    path = Path(path)
    have = {e["seed"]: e for e in read_jsonl(path)} if path.is_file() else {}
    seeds, out = list(seeds), []
    for lo in range(0, len(seeds), batch):
        chunk = seeds[lo: lo + batch]
        if play is not None and not all(s in have for s in chunk):
            have.update((e["seed"], e) for e in play(chunk))
            path.parent.mkdir(parents=True, exist_ok=True)
            write_jsonl_atomic(path, [have[s] for s in sorted(have)])
        out += [have[s] for s in chunk if s in have]
    return out


def summarize(episodes: Sequence[dict], unit: str, n_agents: int) -> dict:
    """Episode rows -> `{unit}_mean` with its 95 % bootstrap CI (`ci95`), the per-episode values,
    how many episodes scored at all (`scoring_episodes`), each agent's option counts
    (`macro_counts`: option -> [A]), the shaped return's mean and CI and, where the game has
    them, the patches alive at the end."""
    values = [e["units"] for e in episodes]
    ci = bootstrap_ci(values)
    counts, options = macro_counts([c for e in episodes for c in e["choices"]], n_agents)  # [A, O]
    row = {"episodes": len(values), f"{unit}_mean": ci.mean, "ci95": [ci.low, ci.high],
           f"{unit}_per_episode": values, "scoring_episodes": sum(v > 0 for v in values),
           "macro_counts": {o: counts[:, j].tolist() for j, o in enumerate(options)}}
    shaped = bootstrap_ci([e["shaped_return"] for e in episodes])
    row["shaped_return_mean"], row["shaped_return_ci95"] = shaped.mean, [shaped.low, shaped.high]
    patches = [e["patches_alive"] for e in episodes if e["patches_alive"] is not None]
    if patches:
        pci = bootstrap_ci(patches)
        row["patches_alive_mean"], row["patches_alive_ci95"] = pci.mean, [pci.low, pci.high]
    return row


def compare(trained: Sequence[dict], frozen: Sequence[dict]) -> dict:
    """Two-sided Mann-Whitney U of trained against frozen episodes: on the real units (`u`, `p`,
    `effect` = P(trained > frozen) + ties / 2) and on the shaped return (`shaped_u`, `shaped_p`)."""
    mw = mann_whitney([e["units"] for e in trained], [e["units"] for e in frozen])
    shaped = mann_whitney([e["shaped_return"] for e in trained], [e["shaped_return"] for e in frozen])
    return {"u": mw.u, "p": mw.p_value, "effect": mw.effect_size, "shaped_u": shaped.u, "shaped_p": shaped.p_value}
