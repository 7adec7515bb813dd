"""Analytic FLOPs of one PA-MAGRPO round: what the rollouts and the update compute, by phase.

    python -m omjax.bench round --flops-only [--backbone qwen3-4b-instruct-2507] [--seeds 1] ...

Counted from shapes, as the programs of `omjax.train` compute them (read off `rollout.py`,
`policy.py` and `update.py`), not measured:

- a *pass* is one forward over `rows` sequences: every weight matmul of every computed token
  (2 FLOPs per weight; `Dims.matmul`), the attention products (QK^T and PV: 4 x heads x head_dim
  FLOPs per (query, key) pair on every attention layer, the whole query x key rectangle, as the
  masked dense attention computes it), the LoRA bottlenecks, and the LM head on the positions
  that get logits (letter mode scores the prompt's last token and the branch block only);
- a *backward* through the frozen base computes only activation gradients (the base's weights
  get none: `value_and_grad` is taken in the LoRA leaves), so its weight matmuls cost one more
  forward, its attention two (dQ and dK from dS, dV and dP), its LoRA bottlenecks two;
- *remat* (`train.remat`) recomputes each layer's forward inside the backward: one more
  forward's worth over the rematerialised fraction of the layers.

The update over whole prompts with every layer recomputed (`Plan(remat=1.0)`): the reference
log-probs (the base, no adapter) in one pass over every whole prompt, old log-probs from the
rollouts (`DecisionBatch.old_logp`), then per epoch a forward, the recomputation and the
backward over every whole prompt: every prompt runs about 7 times. With `shared_prefix` the
prompts' shared prefix (the chat template's header and the game's system message, a quarter of
every prompt) runs once per minibatch and adapter, for the reference and in each epoch, and the
rows only what follows it; `remat` below 1 recomputes only the layers whose activations do not
fit (`remat_fraction`, `omjax.train.oom.planned_remat`).

Everything here is a pure function of plain numbers (`Dims`, `Workload`, `Plan`), so a unit
test can check it by hand.
"""

from __future__ import annotations

import dataclasses
from typing import Any

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "GH200": 989.0}
"""Dense bf16 tensor-core peaks (TFLOP/s) by device-kind substring: the H200 is the H100's chip
with more memory. A device not listed (a CPU) has no peak: utilisation is reported as n/a."""


@dataclasses.dataclass(frozen=True)
class Dims:
    """The shapes a FLOP count needs, per token."""

    matmul: int
    """Weights of all decoder layers' matmuls (projections, MLP, per-layer-input gates; no
    embedding table): 2 x this many FLOPs per token and forward."""
    attention: tuple[int, ...]
    """Per quadratic-attention layer, heads x head_dim of its queries (recurrent layers, such as
    Gated DeltaNet's, have none)."""
    hidden: int
    """d, the width the LM head reads."""
    vocab: int
    lora: int
    """Adapter weights per adapter, rank x (d_in + d_out) summed over the adapted projections."""


@dataclasses.dataclass(frozen=True)
class Pass:
    """One forward over `rows` sequences of `queries` computed tokens attending to `keys` keys each."""

    rows: float
    queries: float
    keys: float
    logits: float
    """Positions per row that go through the LM head."""
    adapted: bool = True
    """Whether the adapters run (the reference pass runs the base alone)."""


def forward_flops(dims: Dims, p: Pass) -> float:
    """FLOPs of one forward pass (module docstring)."""
    tokens = p.rows * p.queries
    body = 2 * dims.matmul * tokens + sum(4 * w for w in dims.attention) * tokens * p.keys
    lora = 2 * dims.lora * tokens if p.adapted else 0.0
    return body + lora + 2 * dims.hidden * dims.vocab * p.rows * p.logits


def backward_flops(dims: Dims, p: Pass) -> float:
    """FLOPs of the backward of `p` to the LoRA leaves: activation gradients through the frozen
    weights (1 forward), the attention (2 forwards) and the LM head (1), weight and input
    gradients of the adapters (2)."""
    tokens = p.rows * p.queries
    return (2 * dims.matmul * tokens + 2 * sum(4 * w for w in dims.attention) * tokens * p.keys
            + 2 * 2 * dims.lora * tokens + 2 * dims.hidden * dims.vocab * p.rows * p.logits)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One seed's round, in tokens (letter mode)."""

    adapters: int
    """Adapters updated (agents; x seeds for a group's round)."""
    decisions: float
    """Decisions per adapter in the round (K rollouts together)."""
    prompt: float
    """Mean tokens of a whole prompt, the shared prefix included."""
    prefix: float
    """Tokens of the shared prompt prefix (cached once per round in the rollouts)."""
    block: float
    """Tokens of the branch block after each prompt (state labels x slot width)."""
    update_prompt: float | None = None
    """Tokens each prompt is padded to in the update (`update_inputs`: the longest, on the
    length grid); None: `prompt` (no padding)."""
    update_suffix: float | None = None
    """Tokens each row after the shared prefix is padded to in the update when the prefix runs
    once per minibatch (`update_inputs` with a known prefix); None: `update_prompt` less the
    prefix."""
    update_rows: float | None = None
    """Rows per adapter the update computes (whole active minibatches); None: `decisions`."""
    minibatch: int = 8
    copies: int = 1
    """Rows per decision: 1 where branch masks keep the state branches apart in one row; the
    number of state branches for a family without them (a recurrent one, `LetterPolicy.
    one_row_per_branch`), whose every branch runs on its own copy of the prompt."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """How the update computes the round."""

    epochs: int = 2
    remat: float = 1.0
    """Fraction of the layers recomputed in each backward (0: none, 1: all, `train.remat`)."""
    shared_prefix: bool = False
    """The shared prefix computed once per minibatch and adapter (for the reference and in each
    epoch, `LetterPolicy.policy_fn` with `prefix_tokens`) instead of in every row."""
    old_from_rollouts: bool = True
    """Old log-probs handed over by the rollouts (otherwise one more adapted pass)."""


def round_flops(dims: Dims, w: Workload, plan: Plan) -> dict[str, float]:
    """FLOPs of one round by phase: `rollout_prefill` (the shared prefix under every adapter, once
    per round), `rollout_decide` (each decision's prompt after the prefix and its branch block on
    the prefix's cache), `rollout_decode` (0: letter mode scores its reply in the same forward),
    `reference`, `old_logp`, and for all epochs together `epoch_forward`, `remat` and `backward`;
    plus `rollout`, `update` and `total`."""
    suffix = w.prompt - w.prefix
    block = w.block / w.copies  # branch tokens in each row
    logits = block + 1
    rows = (w.decisions if w.update_rows is None else w.update_rows) * w.copies
    padded = w.prompt if w.update_prompt is None else w.update_prompt
    out = {
        "rollout_prefill": forward_flops(dims, Pass(w.adapters, w.prefix, w.prefix, 1)),
        "rollout_decide": forward_flops(dims, Pass(w.adapters * w.decisions * w.copies, suffix + block,
                                                   w.prompt + block, logits)),
        "rollout_decode": 0.0,
    }
    whole = Pass(w.adapters * rows, padded + block, padded + block, logits)
    if plan.shared_prefix:
        after = padded - w.prefix if w.update_suffix is None else w.update_suffix
        own = Pass(w.adapters * rows, after + block, w.prefix + after + block, logits)
        minibatches = w.adapters * -(-rows // w.minibatch)
        head = Pass(minibatches, w.prefix, w.prefix, 0)
        ref = forward_flops(dims, dataclasses.replace(own, adapted=False)) + forward_flops(
            dims, dataclasses.replace(head, adapted=False))
        fwd = forward_flops(dims, own) + forward_flops(dims, head)
        bwd = backward_flops(dims, own) + backward_flops(dims, head)
    else:
        ref = forward_flops(dims, dataclasses.replace(whole, adapted=False))
        fwd = forward_flops(dims, whole)
        bwd = backward_flops(dims, whole)
    out["reference"] = ref
    out["old_logp"] = 0.0 if plan.old_from_rollouts else fwd
    out["epoch_forward"] = plan.epochs * fwd
    out["remat"] = plan.epochs * plan.remat * fwd
    out["backward"] = plan.epochs * bwd
    out["rollout"] = out["rollout_prefill"] + out["rollout_decide"] + out["rollout_decode"]
    out["update"] = out["reference"] + out["old_logp"] + out["epoch_forward"] + out["remat"] + out["backward"]
    out["total"] = out["rollout"] + out["update"]
    return out


def remat_fraction(no_remat_bytes: float, remat_bytes: float, device_bytes: float) -> float:
    """Share of the layers to recompute so that an update fits: 0 when its activations all fit
    (`no_remat_bytes`, the whole `memory_estimate` without remat, <= `device_bytes`), 1 when even
    full remat (`remat_bytes`) does not leave room for one more layer's, in between the share of
    the difference that does not fit."""
    if no_remat_bytes <= device_bytes:
        return 0.0
    spare = no_remat_bytes - remat_bytes
    return 1.0 if spare <= 0 else min(1.0, (no_remat_bytes - device_bytes) / spare)


def dims_of(params: Any, lora_shapes: list[dict[str, tuple[int, int]]], targets: tuple[str, ...], rank: int,
            hidden: int, vocab: int) -> Dims:
    """`Dims` from a parameter tree (arrays or `jax.ShapeDtypeStruct`s; `params["layers"]` a
    stack `{name: [L, ...]}`, one stack per layer kind `{kind: {name: [N, ...]}}`, or a list of
    per-layer dicts) and the family's `lora_shapes`. A layer with a `q` projection is a
    quadratic-attention layer; its `o` projection's input width is heads x head_dim."""
    layers = _per_layer_shapes(params["layers"])
    matmul = sum(_size(s) for layer in layers for s in layer.values() if len(s) >= 2)
    attention = tuple(int(layer["o"][0]) for layer in layers if "q" in layer)
    lora = sum(rank * (i + o) for layer in lora_shapes for name, (i, o) in layer.items() if name in targets)
    return Dims(matmul=matmul, attention=attention, hidden=hidden, vocab=vocab, lora=lora)


def _per_layer_shapes(layers: Any) -> list[dict[str, tuple[int, ...]]]:
    """Each layer's `{name: shape}` (without the stack axis) from any of `dims_of`'s layouts."""
    if isinstance(layers, (list, tuple)):
        return [{k: tuple(v.shape) for k, v in layer.items() if hasattr(v, "shape")} for layer in layers]
    if all(isinstance(v, dict) for v in layers.values()):                 # one stack per kind
        return [layer for stack in layers.values() for layer in _per_layer_shapes(stack)]
    n = next(iter(layers.values())).shape[0]
    return [{k: tuple(v.shape[1:]) for k, v in layers.items()}] * n


def _size(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def peak_tflops(device_kind: str) -> float | None:
    """The dense bf16 peak of a device kind (`PEAK_TFLOPS`), or None."""
    return next((v for k, v in PEAK_TFLOPS.items() if k.lower() in device_kind.lower()), None)


def pflop(x: dict[str, float]) -> dict[str, float]:
    """FLOPs -> PFLOP, rounded for a report."""
    return {k: round(v / 1e15, 3) for k, v in x.items()}

