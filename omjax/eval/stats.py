"""Evaluation statistics: percentile bootstrap CIs, Mann-Whitney U, mean ± std, paper tables.

The paper (§6.1, "Evaluation protocol and statistics") reports every cell as mean ± std, headline
cells with a 95 % percentile bootstrap CI over 10,000 resamples, and pairwise comparisons with a
two-sided Mann-Whitney U test. Everything here is a pure function of plain numbers so it can be
fed from any run output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as _scipy_stats

# Resample blocks are drawn in chunks so memory stays bounded for long samples; the generator
# stream is consumed row by row either way, so chunking never changes the result.
_MAX_CHUNK_ELEMENTS = 4_000_000


def _as_sample(values: Sequence[float] | np.ndarray, name: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sample, got shape {x.shape}")
    if x.size == 0:
        raise ValueError(f"{name} is empty: a statistic needs at least one observation")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    return x


@dataclass(frozen=True)
class BootstrapCI:
    """A percentile bootstrap confidence interval for the mean of a sample."""

    mean: float
    """The sample mean (the point estimate)."""
    low: float
    """Lower percentile bound of the bootstrap distribution of the mean."""
    high: float
    """Upper percentile bound of the bootstrap distribution of the mean."""
    confidence: float
    """Nominal coverage, e.g. 0.95."""
    n_resamples: int
    """How many bootstrap resamples were drawn."""

    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def format(self, digits: int = 2) -> str:
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def bootstrap_means(
    values: Sequence[float] | np.ndarray, *, n_resamples: int = 10_000, seed: int = 0
) -> np.ndarray:
    """Means of `n_resamples` with-replacement resamples of `values`, drawn with one seeded stream.

    Row b uses the b-th block of n indices from `np.random.default_rng(seed).integers(0, n)`, so a
    Python loop drawing one block per resample from the same generator reproduces it exactly.
    """
    x = _as_sample(values)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    n = x.size
    rng = np.random.default_rng(seed)
    rows_per_chunk = max(1, _MAX_CHUNK_ELEMENTS // n)
    means = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, rows_per_chunk):
        stop = min(n_resamples, start + rows_per_chunk)
        idx = rng.integers(0, n, size=(stop - start, n))  # [B_chunk, n]
        means[start:stop] = x[idx].mean(axis=1)
    return means


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> BootstrapCI:
    """95 % (by default) percentile bootstrap CI of the mean, 10,000 seeded resamples."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    x = _as_sample(values)
    means = bootstrap_means(x, n_resamples=n_resamples, seed=seed)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return BootstrapCI(
        mean=float(x.mean()),
        low=float(low),
        high=float(high),
        confidence=confidence,
        n_resamples=n_resamples,
    )


@dataclass(frozen=True)
class MannWhitney:
    """Two-sided Mann-Whitney U test between samples x and y."""

    u: float
    """U statistic of x: the number of (x, y) pairs with x > y, ties counted one half."""
    p_value: float
    """Two-sided p-value from `scipy.stats.mannwhitneyu` (exact when small and tie-free)."""
    n_x: int
    n_y: int

    @property
    def effect_size(self) -> float:
        """Common-language effect size P(X > Y) + P(X = Y) / 2, i.e. U / (n_x n_y)."""
        return self.u / (self.n_x * self.n_y)


def mann_whitney(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray
) -> MannWhitney:
    """Two-sided Mann-Whitney U test of x against y (scipy's method choice: exact or normal)."""
    xs = _as_sample(x, "x")
    ys = _as_sample(y, "y")
    result = _scipy_stats.mannwhitneyu(xs, ys, alternative="two-sided")
    return MannWhitney(u=float(result.statistic), p_value=float(result.pvalue), n_x=xs.size, n_y=ys.size)


def mean_std(values: Sequence[float] | np.ndarray, *, ddof: int = 1) -> tuple[float, float]:
    """Mean and standard deviation; a single observation has std 0 rather than NaN.

    ddof=1 (the sample standard deviation) is the default because the tables summarise a sample
    of seeds or episodes, not a whole population.
    """
    x = _as_sample(values)
    if x.size <= ddof:
        return float(x.mean()), 0.0
    return float(x.mean()), float(x.std(ddof=ddof))


def format_mean_std(values: Sequence[float] | np.ndarray, *, digits: int = 2, ddof: int = 1) -> str:
    mean, std = mean_std(values, ddof=ddof)
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


# ---------------------------------------------------------------------------------------------
# Tables in the paper's layout.

TABLE2_ROWS: tuple[tuple[str, str], ...] = (
    ("frozen_native", "Frozen + native (Abl. C)"),
    ("frozen_menu", "Frozen + option menu (base)"),
    ("native_magrpo", "Native + MAGRPO (Abl. A)"),
    ("compound_json", "Compound-JSON + MAGRPO (Abl. D)"),
    ("shared_lora", "Shared-LoRA + option menu (Abl. B)"),
    ("ours", "Full method (ours)"),
    ("ours_hand_guards", "Full method, hand-selected guards"),
)
"""The six cells of Table 2 in the paper's row order, then the full method on the hand-selected
guards the paper's ablations used: (config name, row label)."""

GAME_COLUMNS: Mapping[str, str] = {
    "clean_up": "Cleanup (apples)",
    "overcooked_aa": "Overcooked AA (deliveries)",
    "commons_harvest": "Harvest",
}
"""Column headers for the paper's games; unknown game names are shown verbatim."""


@dataclass(frozen=True)
class Cell:
    """One table cell: the sample its mean ± std is computed from (empty: not run yet)."""

    values: tuple[float, ...]
    note: str = ""
    """Shown after the number, e.g. the paper's dagger for a training run that collapsed."""

    def text(self, digits: int, ddof: int) -> str:
        if not self.values:
            return "–"
        return format_mean_std(self.values, digits=digits, ddof=ddof) + self.note

    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else float("-inf")


def render_markdown_table(
    row_labels: Sequence[str],
    games: Sequence[str],
    cells: Mapping[tuple[str, str], Cell],
    *,
    corner: str = "",
    bold: str = "best",
    bold_rows: Sequence[str] = (),
    digits: int = 2,
    ddof: int = 1,
) -> str:
    """Markdown table: rows `row_labels`, one column per game, each cell `mean ± std`.

    bold="best" marks the highest mean in each column (Table 2); bold="rows" marks every cell of
    `bold_rows` (Table 1 bolds the "ours" rows); bold="none" marks nothing.
    """
    if bold not in ("best", "rows", "none"):
        raise ValueError(f"bold must be 'best', 'rows' or 'none', got {bold!r}")
    unknown = [key for key in cells if key[0] not in row_labels or key[1] not in games]
    if unknown:
        raise ValueError(f"cells outside the table's rows/games: {unknown}")
    best: dict[str, float] = {}
    if bold == "best":
        for game in games:
            means = [cells[(r, game)].mean() for r in row_labels if (r, game) in cells and cells[(r, game)].values]
            if means:
                best[game] = max(means)
    header = [corner] + [GAME_COLUMNS.get(g, g) for g in games]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in row_labels:
        texts = [row]
        for game in games:
            cell = cells.get((row, game), Cell(values=()))
            text = cell.text(digits, ddof)
            emphasise = (bold == "rows" and row in bold_rows) or (
                bold == "best" and cell.values and game in best and np.isclose(cell.mean(), best[game])
            )
            texts.append(f"**{text}**" if emphasise and cell.values else text)
        lines.append("| " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def table1_markdown(
    per_seed_means: Mapping[tuple[str, str, str], Sequence[float]],
    backbones: Sequence[str],
    games: Sequence[str],
    *,
    digits: int = 2,
) -> str:
    """Table 1: rows backbone × {frozen, ours}, columns games, mean ± std over training seeds.

    `per_seed_means[(backbone, variant, game)]` holds one evaluation mean per training seed,
    variant being "frozen" (the frozen base with native actions, the paper's Table 1 row) or
    "ours".
    """
    for key in per_seed_means:
        if key[1] not in ("frozen", "ours"):
            raise ValueError(f"Table 1 variant must be 'frozen' or 'ours', got {key[1]!r} in {key}")
    rows: list[str] = []
    cells: dict[tuple[str, str], Cell] = {}
    ours_rows: list[str] = []
    for backbone in backbones:
        for variant in ("frozen", "ours"):
            label = f"{backbone} ({'frozen, native actions' if variant == 'frozen' else variant})"
            rows.append(label)
            if variant == "ours":
                ours_rows.append(label)
            for game in games:
                values = per_seed_means.get((backbone, variant, game), ())
                cells[(label, game)] = Cell(values=tuple(float(v) for v in values))
    return render_markdown_table(
        rows, games, cells, corner="Base model", bold="rows", bold_rows=ours_rows, digits=digits
    )


def table2_markdown(
    per_episode_returns: Mapping[tuple[str, str], Sequence[float]],
    games: Sequence[str],
    *,
    collapsed: Sequence[tuple[str, str]] = (),
    digits: int = 2,
) -> str:
    """Table 2: the six ablation cells × games, mean ± std over evaluation episodes.

    `per_episode_returns[(cell, game)]` holds the team return of each evaluation episode, cell
    being a config name of `TABLE2_ROWS`. A (cell, game) in `collapsed` is a training run that
    never left zero return; the paper prints it as 0.00 with a dagger.
    """
    names = {name: label for name, label in TABLE2_ROWS}
    cells: dict[tuple[str, str], Cell] = {}
    for (cell, game), values in per_episode_returns.items():
        if cell not in names:
            raise ValueError(f"unknown Table 2 cell {cell!r}; expected one of {sorted(names)}")
        note = " †" if (cell, game) in collapsed else ""
        cells[(names[cell], game)] = Cell(values=tuple(float(v) for v in values), note=note)
    table = render_markdown_table([label for _, label in TABLE2_ROWS], games, cells, digits=digits)
    if collapsed:
        table += "\n† Training collapsed at zero return for the entire training horizon.\n"
    return table
