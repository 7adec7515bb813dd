"""Round checkpoints with orbax: adapters, optimizer state, RNG, round, metrics.

`run_dir/checkpoints/<round>` holds the state after each round (the newest `keep` are kept);
`run_dir/best/<round>` holds the adapters that earned the highest training-time mean team return
(the paper's checkpoint rule): the state the round STARTED from, i.e. the adapters that collected
that round's rollouts, saved before the round's update changed them. orbax writes each checkpoint into a temporary directory and
renames it when complete, so a run killed mid-save leaves the previous checkpoint as the latest
one; `latest_round` only ever sees finished checkpoints.

After orbax finishes a save, `MANIFEST` (the sha256 and size of every file of the checkpoint) is
written next to its files, atomically. `restore` verifies the newest checkpoint against it and
lets orbax read it; a checkpoint that fails either (a truncated or edited file, a deleted
metadata file) is skipped for the next older one, and each skip is reported in one line.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

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
    critic: Any = None
    """The credit plug-in's critic, where it has one (`train.credit: {kind: continuation}`): the
    running statistics of the critic over menu-entry keys, float32 [n_keys, 3]
    (`continuation.name_stats`, keys in `continuation.key_order`'s order for
    `train.credit.keys`); None otherwise."""


MANIFEST = "omjax_manifest.json"
"""File of a checkpoint directory listing the sha256 and size of every other file in it."""


class CheckpointError(RuntimeError):
    """No intact checkpoint to restore; the message says which were tried and why each failed."""


@dataclasses.dataclass(frozen=True)
class Restored:
    """What `Checkpointer.restore` read, and what it had to skip on the way."""

    state: TrainState
    meta: dict
    step: int
    """Round number (directory name) of the checkpoint restored."""
    path: Path
    skipped: tuple[str, ...] = ()
    """One line per newer checkpoint that failed verification: `<path>: <why>`."""


def _files(directory: Path) -> list[Path]:
    return sorted(f for f in directory.rglob("*") if f.is_file() and f.name != MANIFEST)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: Path) -> None:
    """Record the sha256 and size of every file under a finished checkpoint `directory`
    (written to a temporary name and renamed, so a manifest is never half-written)."""
    files = {str(f.relative_to(directory)): {"sha256": _sha256(f), "bytes": f.stat().st_size} for f in _files(directory)}
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(files, indent=0, sort_keys=True))
    os.replace(tmp, directory / MANIFEST)


def verify_manifest(directory: Path) -> str | None:
    """Why `directory` does not match its manifest (None: it does). A checkpoint written
    before manifests existed has none and is left to orbax's own checks."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return None
    try:
        files = json.loads(manifest.read_text())
    except ValueError:
        return f"{MANIFEST} is not valid JSON"
    for name, want in sorted(files.items()):
        f = directory / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != want["bytes"]:
            return f"{name} has {f.stat().st_size} bytes, {want['bytes']} were written"
        if _sha256(f) != want["sha256"]:
            return f"{name} does not match its sha256"
    extra = sorted(str(f.relative_to(directory)) for f in _files(directory) if str(f.relative_to(directory)) not in files)
    return f"{extra[0]} was not written by the save" if extra else None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


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
        for manager, saved in ((self.latest, state), (self.best, best)):
            if saved is None:
                continue
            step = int(saved.round)
            args = ocp.args.Composite(state=ocp.args.StandardSave(saved), meta=ocp.args.JsonSave(meta))
            manager.save(step, args=args, force=True)
            manager.wait_until_finished()
            if jax.process_index() == 0:  # one writer of a multi-host run's shared directory
                write_manifest(Path(manager.directory) / str(step))

    def latest_round(self) -> int | None:
        return self.latest.latest_step()

    def restore(self, template: TrainState, which: str = "latest", step: int | None = None,
                per_layer: Callable[[Any], Any] | None = None) -> Restored:
        """The newest intact checkpoint (`which="latest"`; `step` picks one kept older one) or the
        best one, restored into the structure of `template` (a freshly initialised state of the
        same run config). Newer checkpoints that fail verification are skipped (and listed in
        `Restored.skipped`); CheckpointError when none is intact.

        `per_layer` maps an adapter bank of `template` to the per-layer list layout adapters had
        before the layers were stacked (commit 0c199d5 and earlier; `lora.to_layers`, see
        `Trainer.per_layer`): a checkpoint written in that layout is then read in it and
        converted, bank and optimizer moments alike (`meta["converted"]` says so)."""
        manager = self.latest if which == "latest" else self.best
        steps = sorted(manager.all_steps(), reverse=True)
        if step is not None:
            steps = [s for s in steps if s == step]
        if not steps:
            raise FileNotFoundError(f"no finished checkpoint {'' if step is None else step} under {manager.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        skipped = []
        for step in steps:
            path = Path(manager.directory) / str(step)
            why = verify_manifest(path)
            if why is None:
                try:
                    out = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                                        meta=ocp.args.JsonRestore()))
                except Exception as err:  # noqa: BLE001  (orbax/TensorStore raise many types; each is a skip)
                    why = f"orbax cannot read it ({_one_line(err)})"
                    old = None if per_layer is None else self._restore_per_layer(manager, step, template, per_layer)
                    if old is not None:
                        return Restored(old[0], old[1], step, path, tuple(skipped))
                else:
                    return Restored(out["state"], dict(out["meta"]), step, path, tuple(skipped))
            skipped.append(f"{path}: {why}")
        raise CheckpointError(f"no intact {which} checkpoint under {manager.directory}: " + "; ".join(skipped))

    @staticmethod
    def _restore_per_layer(manager, step: int, template: TrainState, per_layer) -> tuple[TrainState, dict] | None:
        """Checkpoint `step` read in the per-layer adapter layout and stacked, or None when it is
        not in that layout either."""
        from omjax.models.lora import from_layers

        bank_def = jax.tree.structure(template.bank)
        is_bank = lambda x: jax.tree.structure(x) == bank_def  # noqa: E731  (the bank and each Adam moment)
        old = jax.tree.map(lambda x: per_layer(x) if is_bank(x) else x, template, is_leaf=is_bank)
        try:
            out = manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(jax.tree.map(ocp.utils.to_shape_dtype_struct, old)),
                meta=ocp.args.JsonRestore()))
        except Exception:  # noqa: BLE001  (not this layout either: the caller reports the first error)
            return None
        is_old = lambda x: isinstance(x, dict) and isinstance(x.get("layers"), list)  # noqa: E731
        state = jax.tree.map(lambda x: from_layers(x, agent_axis=True) if is_old(x) else x, out["state"],
                             is_leaf=is_old)
        if jax.tree.structure(state) != jax.tree.structure(template):
            return None
        return state, {**dict(out["meta"]), "converted": "per-layer adapters (0c199d5 and earlier) stacked"}

    def discard(self, restored: Restored) -> None:
        """Delete the round checkpoints newer than `restored` (the ones it skipped as broken),
        so the resumed run can write those rounds again."""
        for step in self.latest.all_steps():
            if step > restored.step:
                self.latest.delete(step)
        self.latest.reload()

    def close(self) -> None:
        self.latest.close()
        self.best.close()


def host(tree: Any) -> Any:
    """Device arrays -> NumPy (for JSON metadata and comparisons)."""
    return jax.tree.map(np.asarray, tree)
