"""Run outputs: `metrics.jsonl` (one line per round), per-round decision records, learning curve."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np


def write_jsonl_atomic(path: Path, rows: list[dict]) -> None:
    """Replace `path` with `rows`, one JSON object per line, via a temp file and rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not a JSON line ({e})") from None
    return rows


class MetricsLog:
    """`metrics.jsonl` of a run; on resume, rounds at or after the restart point are dropped so
    the continued run rewrites them. With `write=False` (a process other than the first of a
    multi-host run) the rows are kept but the file is left to the first process."""

    def __init__(self, run_dir: str | Path, start_round: int, write: bool = True):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.write = write
        self.rows = [r for r in read_jsonl(self.path) if r["round"] < start_round]
        if write:
            write_jsonl_atomic(self.path, self.rows)

    def append(self, row: dict) -> None:
        self.rows.append(row)
        if not self.write:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())


def plot_learning_curve(rows: list[dict], path: str | Path, title: str = "") -> None:
    """Team return per round (mean with min-max band over the K rollouts) and per-round KL."""
    import matplotlib  # heavy, and only the PNG needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not rows:
        return
    rounds = [r["round"] for r in rows]
    mean = [r["team_return_mean"] for r in rows]
    lo = [min(r["team_returns"]) for r in rows]
    hi = [max(r["team_returns"]) for r in rows]
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.fill_between(rounds, lo, hi, alpha=0.25, label="min-max over rollouts")
    ax.plot(rounds, mean, marker="o", label="mean team return")
    ax.set_ylabel("team return")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(title or "PA-MAGRPO learning curve")
    # Rounds without an update (zero-spread cohort) have no KL: a gap, not a zero.
    kl = [np.nan if r.get("kl") is None else r["kl"] for r in rows]
    ax2.plot(rounds, kl, marker=".", color="tab:red")
    ax2.set_ylabel("KL to base")
    ax2.set_xlabel("round")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    tmp = Path(str(path) + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
