"""Feature values -> int8 codes (the read set, effect and transient features of a library)."""

from __future__ import annotations

import numpy as np


def codec(features) -> tuple:
    return tuple((f, {v: i for i, v in enumerate(f.values)}) for f in features)


def encode(codec: tuple, values: dict) -> np.ndarray:
    out = []
    for f, table in codec:
        v = values[f.name]
        c = table.get(v)
        out.append(f.code(v) if c is None else c)  # f.code raises the usual error
    return np.array(out, np.int8)
