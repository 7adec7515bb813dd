"""Burn-in records: one per completed option execution, columnar in memory, jsonl on disk.

The jsonl form is the paper's record (§5.1 Stage 2) plus two fields the synthesis needs:

    {"ep": 512, "step": 41, "aid": 0, "opt": "start_cooking", "target": [4, 2],
     "features": {"held": "onion", "tgt_pot_state": "full"}, "outcome": "effect_fail",
     "solo": false, "changed": false, "contested": false,
     "transient": {"partner_adjacent": "no"}}

`features` holds only the guard-eligible read set, measured at initiation; `transient` holds
logged multi-agent features that synthesis never reads. `target` is `[x, y]` or null.
`step` is the env step at which the execution was initiated; `changed` says whether any effect
feature differed across the execution's last step (a success with `changed` false would be a
vacuous success, which the contract diagnostics report); `contested` says whether another agent
acted on the same target on that last step (the only way a partner can still move a shared-state
delta taken across the acting agent's own final step).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from omjax.options.schema import Schema, outcome_code, outcome_name

NO_TARGET = -1


@dataclasses.dataclass(frozen=True)
class RecordTable:
    """Columnar burn-in records; N records, F read-set features, G transient features."""

    ep: np.ndarray  # int32 [N]
    step: np.ndarray  # int32 [N] env step at initiation
    aid: np.ndarray  # int16 [N]
    opt: np.ndarray  # int16 [N] index into schema.options
    target: np.ndarray  # int32 [N, 2] (x, y); NO_TARGET for target-less options
    features: np.ndarray  # int8 [N, F] read-set codes at initiation
    transient: np.ndarray  # int8 [N, G]
    outcome: np.ndarray  # int8 [N] (schema.SUCCESS, EFFECT_FAIL, EXPLICIT_BASE + Reason)
    solo: np.ndarray  # bool [N] True iff recorded in a solo (one acting agent) episode
    changed: np.ndarray  # bool [N] some effect feature differs between before and after the last step
    contested: np.ndarray  # bool [N] another agent acted on the same target on the last step

    def __post_init__(self):
        n = len(self.ep)
        for field in dataclasses.fields(self):
            col = getattr(self, field.name)
            if len(col) != n:
                raise ValueError(f"RecordTable column {field.name!r} has {len(col)} rows, expected {n}")

    def __len__(self) -> int:
        return len(self.ep)

    @classmethod
    def empty(cls, num_features: int, num_transient: int) -> "RecordTable":
        return cls(ep=np.zeros(0, np.int32), step=np.zeros(0, np.int32), aid=np.zeros(0, np.int16),
                   opt=np.zeros(0, np.int16), target=np.zeros((0, 2), np.int32),
                   features=np.zeros((0, num_features), np.int8),
                   transient=np.zeros((0, num_transient), np.int8), outcome=np.zeros(0, np.int8),
                   solo=np.zeros(0, bool), changed=np.zeros(0, bool),
                   contested=np.zeros(0, bool))

    @classmethod
    def build(cls, **cols) -> "RecordTable":
        """Cast columns to the canonical dtypes (`contested` may be omitted: all False)."""
        dtypes = {"ep": np.int32, "step": np.int32, "aid": np.int16, "opt": np.int16,
                  "target": np.int32, "features": np.int8, "transient": np.int8,
                  "outcome": np.int8, "solo": bool, "changed": bool,
                  "contested": bool}
        unknown = set(cols) - set(dtypes)
        if unknown:
            raise ValueError(f"unknown RecordTable columns {sorted(unknown)}")
        if "contested" not in cols:
            # A game that does not track it: no other agent is known to have touched the target.
            cols = {**cols, "contested": np.zeros(len(cols["ep"]), bool)}
        return cls(**{k: np.asarray(cols[k], dtype=t) for k, t in dtypes.items()})

    def select(self, mask: np.ndarray) -> "RecordTable":
        return RecordTable(**{f.name: getattr(self, f.name)[mask] for f in dataclasses.fields(self)})

    @staticmethod
    def concat(tables: list["RecordTable"]) -> "RecordTable":
        if not tables:
            raise ValueError("RecordTable.concat needs at least one table")
        return RecordTable(**{f.name: np.concatenate([getattr(t, f.name) for t in tables])
                              for f in dataclasses.fields(RecordTable)})

    # ------------------------------------------------------------------ json lines
    def to_dicts(self, schema: Schema):
        """Yield one paper-format record dict per row."""
        names = schema.option_names
        for i in range(len(self)):
            tgt = self.target[i]
            yield {
                "ep": int(self.ep[i]), "step": int(self.step[i]), "aid": int(self.aid[i]),
                "opt": names[self.opt[i]],
                "target": None if tgt[0] == NO_TARGET else [int(tgt[0]), int(tgt[1])],
                "features": {f.name: f.values[c] for f, c in zip(schema.read_set, self.features[i])},
                "outcome": outcome_name(self.outcome[i]),
                "solo": bool(self.solo[i]),
                "changed": bool(self.changed[i]),
                "contested": bool(self.contested[i]),
                "transient": {f.name: f.values[c] for f, c in zip(schema.transient, self.transient[i])},
            }

    @classmethod
    def from_dicts(cls, schema: Schema, rows) -> "RecordTable":
        cols = {k: [] for k in ("ep", "step", "aid", "opt", "target", "features", "transient",
                                "outcome", "solo", "changed", "contested")}
        for line_no, row in enumerate(rows, 1):
            try:
                cols["ep"].append(row["ep"])
                cols["step"].append(row["step"])
                cols["aid"].append(row["aid"])
                cols["opt"].append(schema.option_index(row["opt"]))
                cols["target"].append([NO_TARGET, NO_TARGET] if row["target"] is None else row["target"])
                cols["features"].append(schema.encode_read(row["features"]))
                trans = row.get("transient", {})
                cols["transient"].append([f.code(trans[f.name]) if f.name in trans else 0
                                          for f in schema.transient])
                cols["outcome"].append(outcome_code(row["outcome"]))
                cols["solo"].append(bool(row.get("solo", False)))
                cols["changed"].append(bool(row.get("changed", False)))
                cols["contested"].append(bool(row.get("contested", False)))
            except (KeyError, ValueError, TypeError) as err:
                raise ValueError(f"record {line_no}: {err!r}") from err
        if not cols["ep"]:
            return cls.empty(len(schema.read_set), len(schema.transient))
        cols["transient"] = np.asarray(cols["transient"], np.int8).reshape(len(cols["ep"]), len(schema.transient))
        return cls.build(**cols)


def write_records_jsonl(path: str | os.PathLike, table: RecordTable, schema: Schema) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for row in table.to_dicts(schema):
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def read_records_jsonl(path: str | os.PathLike, schema: Schema) -> RecordTable:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return RecordTable.from_dicts(schema, rows)


def save_npz(path: str | os.PathLike, table: RecordTable) -> None:
    """Columnar binary form (fast for the ~10^6 records of a full burn-in)."""
    np.savez_compressed(path, **{f.name: getattr(table, f.name) for f in dataclasses.fields(table)})


def load_npz(path: str | os.PathLike) -> RecordTable:
    with np.load(path) as data:
        return RecordTable(**{f.name: data[f.name] for f in dataclasses.fields(RecordTable)})
