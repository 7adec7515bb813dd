"""Behavioural audits (paper §6.3-§6.4) over plain data, with PNG plots.

Every audit takes what any rollout engine can emit -- per-decision records, per-step series,
per-agent count grids -- so it does not depend on how the rollouts were produced:

* macro-choice histogram per agent (Fig. 1) from decision records `{"aid": int, "opt": str}`;
* Harvest patch survival, frozen vs tuned (Fig. 2) from per-step patches-alive series `[E, T]`;
* per-agent visit heatmaps (Fig. 3) from per-step positions `[T, A, 2]` or count grids `[A, H, W]`;
* the solo test (each agent alone in the layout) and its Forced Coordination control (§6.4).

Plots use `matplotlib.figure.Figure` directly (the Agg canvas), never pyplot, so importing this
module changes no global matplotlib state and works without a display.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

# ---------------------------------------------------------------------------------------------
# Fig. 1: per-agent macro-choice histogram.


def macro_counts(
    records: Iterable[Mapping], n_agents: int, options: Sequence[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """Count each agent's option choices: returns (counts [A, O], option names).

    `records` are per-decision dicts with the agent index under "aid" and the chosen option's
    name under "opt" (the burn-in record keys of §5.1). Options not in `options` are appended in
    first-seen order, so a fixed menu vocabulary keeps a stable column order across runs.
    """
    if n_agents < 1:
        raise ValueError(f"n_agents must be >= 1, got {n_agents}")
    names = list(options or [])
    column = {name: j for j, name in enumerate(names)}
    pairs: list[tuple[int, int]] = []
    for k, record in enumerate(records):
        if "aid" not in record or "opt" not in record:
            raise ValueError(f"decision record {k} lacks 'aid' or 'opt': {dict(record)}")
        aid = int(record["aid"])
        if not 0 <= aid < n_agents:
            raise ValueError(f"decision record {k} has aid {aid}, outside 0..{n_agents - 1}")
        opt = str(record["opt"])
        if opt not in column:
            column[opt] = len(names)
            names.append(opt)
        pairs.append((aid, column[opt]))
    counts = np.zeros((n_agents, len(names)), dtype=np.int64)  # [A, O]
    if pairs:
        np.add.at(counts, tuple(np.asarray(pairs).T), 1)
    return counts, names


def choice_fractions(counts: np.ndarray) -> np.ndarray:
    """Row-normalise counts [A, O] into per-agent choice fractions; an agent that never decided
    gets a zero row rather than NaN."""
    counts = np.asarray(counts, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)  # [A, 1]
    return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)


def plot_macro_histogram(
    counts: np.ndarray, options: Sequence[str], path: str | Path, *, title: str = "Per-agent macro choices"
) -> Path:
    """Grouped bar chart of each agent's choice fractions over the options (Fig. 1)."""
    fractions = choice_fractions(counts)  # [A, O]
    n_agents, n_options = fractions.shape
    if n_options != len(options):
        raise ValueError(f"counts have {n_options} option columns but {len(options)} names were given")
    fig = Figure(figsize=(max(6.0, 0.9 * n_options + 2.0), 4.0))
    ax = fig.add_subplot()
    width = 0.8 / n_agents
    x = np.arange(n_options)
    for a in range(n_agents):
        ax.bar(x + (a - (n_agents - 1) / 2) * width, 100.0 * fractions[a], width, label=f"agent {a}")
    ax.set_xticks(x, list(options), rotation=30, ha="right")
    ax.set_ylabel("share of the agent's decisions (%)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------
# Fig. 2: Harvest patch survival.


@dataclass(frozen=True)
class SurvivalCurve:
    """Patches alive per step, summarised over evaluation episodes."""

    mean: np.ndarray
    """[T] mean number of patches alive at each step."""
    low: np.ndarray
    """[T] 10th percentile over episodes."""
    high: np.ndarray
    """[T] 90th percentile over episodes."""
    depletion_step: np.ndarray
    """[E] first step with no patch alive, or -1 when some patch survives the whole episode."""


def patch_survival(patches_alive: np.ndarray) -> SurvivalCurve:
    """Summarise per-episode, per-step patches-alive counts [E, T]."""
    alive = np.asarray(patches_alive, dtype=np.float64)
    if alive.ndim != 2 or alive.size == 0:
        raise ValueError(f"patches_alive must be a non-empty [episodes, steps] array, got shape {alive.shape}")
    if np.any(alive < 0):
        raise ValueError("patches_alive has negative counts")
    dead = alive <= 0  # [E, T]
    depletion = np.where(dead.any(axis=1), dead.argmax(axis=1), -1)
    low, high = np.percentile(alive, [10.0, 90.0], axis=0)
    return SurvivalCurve(mean=alive.mean(axis=0), low=low, high=high, depletion_step=depletion)


def plot_patch_survival(
    curves: Mapping[str, np.ndarray], path: str | Path, *, n_patches: int | None = None,
    title: str = "Commons Harvest patch survival",
) -> Path:
    """Patches alive over time, one line (mean) and band (10-90 %) per policy (Fig. 2)."""
    if not curves:
        raise ValueError("plot_patch_survival needs at least one policy's patches-alive series")
    fig = Figure(figsize=(6.5, 4.0))
    ax = fig.add_subplot()
    for label, series in curves.items():
        curve = patch_survival(series)
        steps = np.arange(curve.mean.size)
        (line,) = ax.plot(steps, curve.mean, label=label)
        ax.fill_between(steps, curve.low, curve.high, color=line.get_color(), alpha=0.2)
    if n_patches is not None:
        ax.set_ylim(0, n_patches + 0.5)
    ax.set_xlabel("environment step")
    ax.set_ylabel("patches alive")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------
# Fig. 3: per-agent visit heatmaps.


def visit_counts(positions: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Per-agent visit counts [A, H, W] from per-step (row, col) positions [T, A, 2]."""
    pos = np.asarray(positions)
    if pos.ndim != 3 or pos.shape[-1] != 2:
        raise ValueError(f"positions must be [steps, agents, 2], got shape {pos.shape}")
    height, width = shape
    rows, cols = pos[..., 0], pos[..., 1]  # [T, A]
    if np.any((rows < 0) | (rows >= height) | (cols < 0) | (cols >= width)):
        raise ValueError(f"positions fall outside the {height}x{width} map")
    n_agents = pos.shape[1]
    counts = np.zeros((n_agents, height, width), dtype=np.int64)
    agent = np.broadcast_to(np.arange(n_agents), rows.shape)
    np.add.at(counts, (agent.ravel(), rows.ravel(), cols.ravel()), 1)
    return counts


def plot_visit_heatmaps(
    counts: np.ndarray, path: str | Path, *, walls: np.ndarray | None = None,
    title: str = "Per-agent visit heatmaps",
) -> Path:
    """One panel per agent, log-scaled visit counts on the map; walls (bool [H, W]) greyed."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 3:
        raise ValueError(f"counts must be [agents, height, width], got shape {counts.shape}")
    n_agents, height, width = counts.shape
    if walls is not None and np.shape(walls) != (height, width):
        raise ValueError(f"walls mask has shape {np.shape(walls)}, map is {(height, width)}")
    n_cols = min(n_agents, 4)
    n_rows = -(-n_agents // n_cols)
    panel = 2.6 * max(1.0, width / max(height, 1)) ** 0.5
    fig = Figure(figsize=(panel * n_cols, panel * n_rows * height / max(width, 1) + 0.8))
    vmax = float(np.log1p(counts.max())) or 1.0
    cmap = colormaps["viridis"].with_extremes(bad="0.75")  # walls grey, never-visited floor dark
    for a in range(n_agents):
        ax = fig.add_subplot(n_rows, n_cols, a + 1)
        image = np.log1p(counts[a])
        if walls is not None:
            image = np.ma.masked_array(image, mask=np.asarray(walls, dtype=bool))
        ax.imshow(image, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"a{a}: {int(counts[a].sum())} visits", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


# ---------------------------------------------------------------------------------------------
# §6.4: solo test and the Forced Coordination control.


@dataclass(frozen=True)
class SoloReport:
    """Team returns beside each agent's return when placed alone in the same layout."""

    team: np.ndarray
    """[E] team return per evaluation episode with every agent present."""
    solo: np.ndarray
    """[A, E] return of agent a playing alone, per evaluation episode."""
    partner: str = "still"
    """How the others are kept out of an agent's solo episode: `absent` (a one-player state of
    the same layout) or `still` (their bodies stay at their start poses, never deciding)."""

    @property
    def solo_mean(self) -> np.ndarray:
        return self.solo.mean(axis=1)  # [A]

    @property
    def solo_capable(self) -> np.ndarray:
        """[A] bool: the agent scores on its own in at least one episode."""
        return (self.solo > 0).any(axis=1)

    @property
    def coordination_certified(self) -> bool:
        """Team reward that no agent can earn alone: the return needs a partner (§6.4, FC)."""
        return bool(self.team.mean() > 0 and not self.solo_capable.any())

    @property
    def verdict(self) -> str:
        """`coordination certified`, `solo-solvable` (an agent scores alone), or `nobody scored`
        (no return at all, so the test says nothing about coordination)."""
        if self.coordination_certified:
            return "coordination certified"
        return "solo-solvable" if self.solo_capable.any() else "nobody scored"

    def summary(self) -> dict:
        return {
            "team_mean": float(self.team.mean()),
            "solo_mean": [float(v) for v in self.solo_mean],
            "solo_capable": [bool(v) for v in self.solo_capable],
            "coordination_certified": self.coordination_certified,
            "verdict": self.verdict,
            "partner": self.partner,
        }


def solo_test(
    run_team: Callable[[int], float],
    run_solo: Callable[[int, int], float],
    n_agents: int,
    seeds: Sequence[int],
) -> SoloReport:
    """Run the team and each agent alone on every seed.

    `run_team(seed)` plays one episode with all agents; `run_solo(agent, seed)` plays one episode
    with only that agent in the layout; both return the episode's task return (deliveries).
    """
    if not seeds:
        raise ValueError("solo_test needs at least one evaluation seed")
    team = np.array([float(run_team(seed)) for seed in seeds])
    solo = np.array([[float(run_solo(agent, seed)) for seed in seeds] for agent in range(n_agents)])
    return SoloReport(team=team, solo=solo)


# ---------------------------------------------------------------------------------------------
# §4: does a native-action agent ever turn before it fires the cleaning beam?

TURNS = ("turn left", "turn right")
FIRE_CLEAN = "fire clean"


@dataclass(frozen=True)
class FireCleanAudit:
    """The §4 spatial-hallucination audit of native Cleanup decisions."""

    fire_clean: np.ndarray
    """[A] fire_clean actions of each agent."""
    after_turn: np.ndarray
    """[A] of those, the ones whose agent's previous action in the episode was a turn."""
    counts: dict[str, int]
    """Primitive action -> how often it was chosen (all agents, all episodes)."""

    def summary(self) -> dict:
        total = max(sum(self.counts.values()), 1)
        return {"fire_clean": self.fire_clean.tolist(), "fire_clean_after_turn": self.after_turn.tolist(),
                "decisions": sum(self.counts.values()),
                "shares": {name: n / total for name, n in self.counts.items()}}


def _action_name(name: str) -> str:
    return str(name).replace("_", " ").lower()


def fire_clean_audit(records: Iterable[Mapping], n_agents: int) -> FireCleanAudit:
    """Count fire_clean actions preceded by a turn of the same agent (§4: never, for the frozen
    base). `records` are per-decision dicts with "episode", "agent", "step" and "option" (the
    primitive's name, e.g. `turn left`, `fire clean`; underscores are read as spaces)."""
    by_agent: dict[tuple, list[tuple[int, str]]] = {}
    counts: dict[str, int] = {}
    for k, r in enumerate(records):
        missing = [key for key in ("episode", "agent", "step", "option") if key not in r]
        if missing:
            raise ValueError(f"decision record {k} lacks {missing}: {dict(r)}")
        agent = int(r["agent"])
        if not 0 <= agent < n_agents:
            raise ValueError(f"decision record {k} has agent {agent}, outside 0..{n_agents - 1}")
        name = _action_name(r["option"])
        counts[name] = counts.get(name, 0) + 1
        by_agent.setdefault((r["episode"], agent), []).append((int(r["step"]), name))
    fire = np.zeros(n_agents, np.int64)
    after = np.zeros(n_agents, np.int64)
    for (_, agent), seq in by_agent.items():
        names = [name for _, name in sorted(seq)]
        for prev, name in zip([None, *names[:-1]], names):
            if name == FIRE_CLEAN:
                fire[agent] += 1
                after[agent] += prev in TURNS
    return FireCleanAudit(fire_clean=fire, after_turn=after, counts=counts)


def plot_fire_clean_audit(audit: FireCleanAudit, path: str | Path, *, title: str = "Native Cleanup actions") -> Path:
    """Share of each primitive action, titled with the fire_clean-after-a-turn count (§4)."""
    summary = audit.summary()
    names = sorted(summary["shares"], key=lambda n: -summary["shares"][n])
    fig = Figure(figsize=(max(5.0, 0.8 * len(names) + 2.0), 3.8))
    ax = fig.add_subplot()
    ax.bar(names, [100 * summary["shares"][n] for n in names],
           color=["tab:red" if n == FIRE_CLEAN else "tab:gray" for n in names])
    ax.set_ylabel("% of decisions")
    ax.tick_params(axis="x", labelrotation=30)
    ax.set_title(f"{title}\nfire clean after a turn: {int(audit.after_turn.sum())} of {int(audit.fire_clean.sum())}",
                 fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_solo_test(reports: Mapping[str, SoloReport], path: str | Path, *, title: str = "Solo test") -> Path:
    """Bars per layout: team mean, then each agent's solo mean (§6.4)."""
    if not reports:
        raise ValueError("plot_solo_test needs at least one layout's report")
    fig = Figure(figsize=(3.2 * len(reports) + 1.0, 3.8))
    for k, (layout, report) in enumerate(reports.items()):
        ax = fig.add_subplot(1, len(reports), k + 1)
        labels = ["team"] + [f"a{a} alone" for a in range(report.solo.shape[0])]
        values = [report.team.mean(), *report.solo_mean]
        ax.bar(labels, values, color=["tab:green"] + ["tab:gray"] * report.solo.shape[0])
        ax.set_title(f"{layout}\n({report.verdict}; partner {report.partner} when alone)", fontsize=9)
        ax.set_ylabel("return per episode")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"plots are written as PNG; got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
