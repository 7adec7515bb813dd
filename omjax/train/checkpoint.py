"""Round checkpoints with orbax: adapters, optimizer state, RNG, round, metrics.

`run_dir/checkpoints/<round>` holds the state after each round (the newest `keep` are kept);
`run_dir/best/<round>` holds the adapters that earned the highest training-time mean team return
(the paper's checkpoint rule): the state the round STARTED from, i.e. the adapters that collected
that round's rollouts, saved before the round's update changed them. orbax writes each checkpoint into a temporary directory and
renames it when complete, so a run killed mid-save leaves the previous checkpoint as the latest
one; `latest_round` only ever sees finished checkpoints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import struct


@struct.dataclass
class TrainState:
    """Everything a resumed run needs to continue exactly where it stopped."""

    bank: Any
    """LoRA adapter bank, leaves [n_adapters, ...]."""
    opt_state: Any
    """Per-adapter Adam state, leaves [n_adapters, ...]."""
    key: jax.Array
    """Raw uint32 PRNG key [2] for the next round."""
    round: jax.Array
    """int32 [] number of finished rounds."""
    best_return: jax.Array
    """float32 [] best mean team return of a finished round (-inf before any)."""


def _manager(path: Path, keep: int) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
    return ocp.CheckpointManager(path.absolute(), options=options)


class Checkpointer:
    """Latest-`keep` round checkpoints plus the best one, under a run directory."""

    def __init__(self, run_dir: str | Path, keep: int = 2):
        run_dir = Path(run_dir)
        self.latest = _manager(run_dir / "checkpoints", keep)
        self.best = _manager(run_dir / "best", 1)

    def save(self, state: TrainState, meta: dict, best: TrainState | None = None) -> None:
        """Write the state after round `state.round`, and `best` (when given) as the best one."""
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        self.latest.save(int(state.round), args=args, force=True)
        self.latest.wait_until_finished()
        if best is not None:
            args = ocp.args.Composite(state=ocp.args.StandardSave(best), meta=ocp.args.JsonSave(meta))
            self.best.save(int(best.round), args=args, force=True)
            self.best.wait_until_finished()

    def latest_round(self) -> int | None:
        return self.latest.latest_step()

    def restore(self, template: TrainState, which: str = "latest", step: int | None = None) -> tuple[TrainState, dict]:
        """The newest finished checkpoint (`which="latest"`; `step` picks a kept older one) or the
        best one, restored into the structure of `template` (a freshly initialised state of the
        same run config)."""
        manager = self.latest if which == "latest" else self.best
        step = manager.latest_step() if step is None else step
        if step is None or step not in manager.all_steps():
            raise FileNotFoundError(f"no finished checkpoint {'' if step is None else step} under {manager.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        out = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                            meta=ocp.args.JsonRestore()))
        return out["state"], dict(out["meta"])

    def close(self) -> None:
        self.latest.close()
        self.best.close()


def host(tree: Any) -> Any:
    """Device arrays -> NumPy (for JSON metadata and comparisons)."""
    return jax.tree.map(np.asarray, tree)
