"""Per-episode evaluation results: one `eval.jsonl` line each, plus the `report.md` built on them.

An `EpisodeResult` is what `omjax eval` writes for every held-out episode (§6.1: 20 episodes on
seeds 10000-10019). Per-agent fields are lists indexed by agent, so nothing assumes a team size.
`render_report` turns the results of one or more policies into the report: team return with a
95 % percentile bootstrap CI, per-agent returns, call ratio, parse-failure and invalid-action
rates, macro and primitive-action shares, and two-sided Mann-Whitney U between every pair.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from omjax.eval.stats import bootstrap_ci, format_mean_std, mann_whitney, mean_std


@dataclass(frozen=True)
class EpisodeResult:
    """What one evaluation episode produced."""

    policy: str
    """Label of the evaluated policy (a checkpoint or config name); groups episodes in reports."""
    game: str
    """Game name, e.g. `overcooked` or `clean_up`."""
    layout: str
    """Map or kitchen layout within the game."""
    interface: str
    """Action interface: `options`, `native` or `compound_json`."""
    seed: int
    """Environment seed of the episode (held out from training)."""
    env_steps: int
    """Primitive environment steps the episode ran."""
    team_return: float
    """Shared team return (deliveries in Overcooked, apples in Melting Pot)."""
    agent_returns: tuple[float, ...]
    """[A] each agent's own contribution (its deliveries or apples)."""
    llm_calls: tuple[int, ...]
    """[A] decisions the agent's LLM was asked for."""
    parse_failures: tuple[int, ...]
    """[A] replies that named no valid choice or were not parseable."""
    invalid_actions: tuple[int, ...]
    """[A] emissions that parsed but could not act: invalid or no-op compound actions."""
    macro_counts: tuple[dict[str, int], ...]
    """[A] option (macro) name -> how often the agent chose it."""
    primitive_counts: tuple[dict[str, int], ...]
    """[A] primitive action name -> how often the agent executed it."""
    agent_cleaned: tuple[int, ...] = ()
    """[A] dirt cells each agent cleaned (Cleanup; empty in other games). With `agent_returns`
    (apples eaten) it is the cleaner/eater split of the roles audit (§6.3)."""

    def __post_init__(self) -> None:
        n = len(self.agent_returns)
        if n < 1:
            raise ValueError("an episode result needs at least one agent")
        sized = ["llm_calls", "parse_failures", "invalid_actions", "macro_counts", "primitive_counts"]
        for name in sized + (["agent_cleaned"] if self.agent_cleaned else []):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries but there are {n} agents")
        if self.env_steps < 1:
            raise ValueError(f"env_steps must be >= 1, got {self.env_steps}")

    @property
    def n_agents(self) -> int:
        return len(self.agent_returns)

    @property
    def call_ratio(self) -> float:
        """LLM calls per agent-step: 1.0 for native actions, below 1 when options span steps."""
        return sum(self.llm_calls) / (self.n_agents * self.env_steps)

    @property
    def parse_failure_rate(self) -> float:
        return sum(self.parse_failures) / max(sum(self.llm_calls), 1)

    @property
    def invalid_action_rate(self) -> float:
        return sum(self.invalid_actions) / max(sum(self.llm_calls), 1)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping) -> EpisodeResult:
        names = {f.name for f in dataclasses.fields(cls)}
        required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        missing = sorted(required - set(data))
        unknown = sorted(set(data) - names)
        if missing or unknown:
            raise ValueError(f"episode result fields: missing {missing}, unknown {unknown}")
        tuples = ("agent_returns", "llm_calls", "parse_failures", "invalid_actions", "macro_counts", "primitive_counts",
                  "agent_cleaned")
        return cls(**{k: tuple(v) if k in tuples else v for k, v in data.items()})


def write_results(path: str | Path, results: Iterable[EpisodeResult], *, append: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w") as f:
        for result in results:
            f.write(result.to_json() + "\n")
    return path


def read_results(path: str | Path) -> list[EpisodeResult]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation results at {path}")
    results = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            results.append(EpisodeResult.from_dict(json.loads(line)))
        except (json.JSONDecodeError, ValueError, TypeError) as err:
            raise ValueError(f"{path}:{line_no}: not an episode result: {err}") from err
    return results


def group_by_policy(results: Iterable[EpisodeResult]) -> dict[str, list[EpisodeResult]]:
    groups: dict[str, list[EpisodeResult]] = {}
    for result in results:
        groups.setdefault(result.policy, []).append(result)
    return groups


def _summed_shares(dicts: Iterable[Mapping[str, int]]) -> dict[str, float]:
    totals: dict[str, int] = {}
    for counts in dicts:
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + int(count)
    grand = sum(totals.values())
    return {name: count / grand for name, count in sorted(totals.items(), key=lambda kv: -kv[1])} if grand else {}


def _share_table(title: str, episodes: Sequence[EpisodeResult], field: str) -> list[str]:
    n_agents = episodes[0].n_agents
    shares = [_summed_shares(getattr(e, field)[a] for e in episodes) for a in range(n_agents)]
    names = sorted({name for s in shares for name in s})
    if not names:
        return []
    lines = [f"{title}", "", "| agent | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for a, share in enumerate(shares):
        lines.append(f"| a{a} | " + " | ".join(f"{100 * share.get(n, 0.0):.1f}%" for n in names) + " |")
    return lines + [""]


def render_report(results: Sequence[EpisodeResult], *, seed: int = 0, digits: int = 2) -> str:
    """The markdown report of `omjax eval` over one or more evaluated policies."""
    groups = group_by_policy(results)
    if not groups:
        raise ValueError("render_report needs at least one episode result")
    lines = ["# Evaluation report", ""]
    lines += [
        "| policy | game / layout | interface | episodes | team return (mean ± std) | 95 % CI | call ratio | parse failures | invalid actions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, episodes in groups.items():
        returns = [e.team_return for e in episodes]
        ci = bootstrap_ci(returns, seed=seed)
        first = episodes[0]
        lines.append(
            f"| {policy} | {first.game} / {first.layout} | {first.interface} | {len(episodes)} | "
            f"{format_mean_std(returns, digits=digits)} | [{ci.low:.{digits}f}, {ci.high:.{digits}f}] | "
            f"{np.mean([e.call_ratio for e in episodes]):.2f} | "
            f"{100 * np.mean([e.parse_failure_rate for e in episodes]):.1f}% | "
            f"{100 * np.mean([e.invalid_action_rate for e in episodes]):.1f}% |"
        )
    lines += ["", "CI: 95 % percentile bootstrap of the mean, 10,000 resamples.", ""]
    for policy, episodes in groups.items():
        lines += [f"## {policy}", ""]
        n_agents = episodes[0].n_agents
        if any(e.n_agents != n_agents for e in episodes):
            raise ValueError(f"policy {policy!r} mixes episodes with different agent counts")
        per_agent = np.array([e.agent_returns for e in episodes])  # [E, A]
        lines += ["| agent | return (mean ± std) | LLM calls / episode |", "|---|---|---|"]
        for a in range(n_agents):
            mean, std = mean_std(per_agent[:, a])
            calls = np.mean([e.llm_calls[a] for e in episodes])
            lines.append(f"| a{a} | {mean:.{digits}f} ± {std:.{digits}f} | {calls:.1f} |")
        lines.append("")
        if all(e.agent_cleaned for e in episodes):
            cleaned = np.array([e.agent_cleaned for e in episodes], float)  # [E, A]
            lines += ["Cleanup roles (per episode, mean ± std):", "",
                      "| agent | dirt cleaned | apples eaten |", "|---|---|---|"]
            for a in range(n_agents):
                lines.append(f"| a{a} | {format_mean_std(cleaned[:, a], digits=digits)} | "
                             f"{format_mean_std(per_agent[:, a], digits=digits)} |")
            lines.append("")
        lines += _share_table("Macro choices (share of each agent's decisions):", episodes, "macro_counts")
        lines += _share_table("Primitive actions (share of each agent's env steps):", episodes, "primitive_counts")
    if len(groups) > 1:
        lines += ["## Pairwise comparisons (team return, two-sided Mann-Whitney U)", ""]
        lines += ["| policy x | policy y | U | P(X>Y)+½P(X=Y) | p-value |", "|---|---|---|---|---|"]
        for (px, ex), (py, ey) in itertools.combinations(groups.items(), 2):
            test = mann_whitney([e.team_return for e in ex], [e.team_return for e in ey])
            lines.append(f"| {px} | {py} | {test.u:.1f} | {test.effect_size:.3f} | {test.p_value:.3g} |")
        lines.append("")
    return "\n".join(lines)


@dataclass(frozen=True)
class Trajectory:
    """Per-step spatial record of one evaluation episode, for the visit and patch audits."""

    positions: np.ndarray
    """int32 [T, A, 2]: (row, col) map cell of each agent after each step."""
    walls: np.ndarray
    """bool [H, W]: impassable cells of the map (drawn grey under the heatmaps)."""
    patches_alive: np.ndarray | None = None
    """int32 [T]: Commons Harvest patches with at least one apple after each step; None elsewhere."""

    def __post_init__(self) -> None:
        if self.positions.ndim != 3 or self.positions.shape[-1] != 2:
            raise ValueError(f"positions must be [steps, agents, 2], got {self.positions.shape}")
        if self.walls.ndim != 2:
            raise ValueError(f"walls must be [height, width], got {self.walls.shape}")
        if self.patches_alive is not None and self.patches_alive.shape != self.positions.shape[:1]:
            raise ValueError(
                f"patches_alive has shape {self.patches_alive.shape}, expected ({self.positions.shape[0]},)"
            )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {"positions": self.positions, "walls": self.walls}
        if self.patches_alive is not None:
            arrays["patches_alive"] = self.patches_alive
        with path.open("wb") as f:
            np.savez_compressed(f, **arrays)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trajectory:
        with np.load(path) as data:
            return cls(
                positions=data["positions"].astype(np.int32),
                walls=data["walls"].astype(bool),
                patches_alive=data["patches_alive"].astype(np.int32) if "patches_alive" in data else None,
            )


def trajectory_path(eval_dir: str | Path, seed: int) -> Path:
    """Where `omjax eval` stores the trajectory of the episode seeded `seed`."""
    return Path(eval_dir) / "trajectories" / f"seed{seed}.npz"
