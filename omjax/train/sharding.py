"""Where a run's arrays live when several devices are visible: the frozen base replicated, the
S x A adapter bank (its optimizer state and its decision batches) and each backbone call's
decision rows split over the devices along their leading axis (`jax.sharding`: a one-axis
`Mesh` and `NamedSharding`s). The jitted decide and update programs then run partitioned by XLA,
each device holding its share of the adapters and rows; results equal one device's up to float
rounding. Several hosts join one mesh after `jax.distributed.initialize()` (then
`jax.devices()` lists every host's devices). A leading axis that the device count does not
divide stays replicated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


class Placement:
    """Device placement over `devices` (default: every device of every process)."""

    def __init__(self, devices: Sequence[Any] | None = None):
        self.devices = list(jax.devices() if devices is None else devices)
        if not self.devices:
            raise ValueError("Placement needs at least one device")
        self.mesh = Mesh(np.array(self.devices), ("devices",))
        self._replicated = NamedSharding(self.mesh, PartitionSpec())
        self._split = NamedSharding(self.mesh, PartitionSpec("devices"))

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def replicate(self, tree: Any) -> Any:
        """Every leaf on every device (one device: the tree as it is)."""
        return tree if self.n_devices == 1 else jax.device_put(tree, self._replicated)

    def split(self, tree: Any) -> Any:
        """Leaves [N, ...] split over the devices along N (replicated when N % devices != 0)."""
        if self.n_devices == 1:
            return tree
        leaves = jax.tree.leaves(tree)
        divisible = all(np.ndim(x) and np.shape(x)[0] % self.n_devices == 0 for x in leaves)
        return jax.device_put(tree, self._split if divisible else self._replicated)
