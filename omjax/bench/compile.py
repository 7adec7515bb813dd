"""`python -m omjax.bench compile`: compile time of the trainer's programs at the paper's shapes.

    python -m omjax.bench compile                          # the published backbones and SmolLM2
    python -m omjax.bench compile --models qwen3-4b-instruct-2507 --programs decide
    python -m omjax.bench compile --tiny                   # test-sized configs (the suite's smoke run)

Per backbone and program, the program is lowered and compiled from abstract weights
(`jax.ShapeDtypeStruct`s from `omjax.models.configs.abstract_params`: nothing is allocated, so
a 4B model compiles on a laptop) exactly as `omjax.bench gpu` builds it:
- `decide`: one letter-mode call over 2 agents x 6 rollouts x `--seeds` seeds of rows
  (`gpu.decide_case`), prompts of `--prompt-tokens`;
- `update`: one PA-MAGRPO update of `--seeds` x 2 adapters, rank 16 on q/k/v/o, `--decisions`
  decisions each, 2 epochs, per-layer remat (`gpu.update_case`).
Each is also compiled at a quarter of the depth (`configs.with_depth`), rounded up to whole
repeating blocks of the layer pattern (`quarter_depth`): with the layers one scanned stack,
`ratio` (full / quarter compile seconds) stays near 1; a Python loop over layers made it grow
with depth. Before each pair the same program of the backbone's test-sized config is compiled
once, uncounted, so one-time setup does not land on the depth measured first; the two depths
are then compiled `--repeats` times, interleaved, and the fastest of each kept. `hlo_kb` is the
size of the lowered StableHLO text. The persistent compilation cache is off, so every figure is
a real compile. Ends with one JSON line `{"bench": "compile", ...}`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
import jax.numpy as jnp

from omjax.bench import gpu
from omjax.models import configs
from omjax.models.loader import Model

SMOLLM2 = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576,
           "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 100000.0, "tie_word_embeddings": True,
           "max_position_embeddings": 8192, "hidden_act": "silu"}
"""HuggingFaceTB/SmolLM2-135M-Instruct's config.json (the shipped GGUF's metadata)."""

_SMOLLM2_TINY = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8,
                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}

BACKBONES = ("smollm2-135m", "qwen3-4b-instruct-2507", "qwen3.5-2b", "gemma-4-e4b-it", "gemma-4-e2b-it")
PROGRAMS = ("decide", "update")


def _hf(name: str, tiny: bool, layers: int | None) -> dict:
    if name != "smollm2-135m":
        return configs.published(name, tiny, layers)
    hf = {**SMOLLM2, **(_SMOLLM2_TINY if tiny else {})}
    return hf if layers is None else configs.with_depth(hf, layers)


def _depth(name: str, tiny: bool) -> int:
    return configs._text(_hf(name, tiny, None))["num_hidden_layers"]


def _period(name: str, tiny: bool) -> int:
    """Length of the repeating block of the backbone's layer-type pattern (1 without one):
    gemma-4-E4B's 5 sliding + 1 full is 6, Qwen3.5's 3 linear + 1 full is 4."""
    text = configs._text(_hf(name, tiny, None))
    types = list(text.get("layer_types") or ())
    types = types[:len(types) - (text.get("num_kv_shared_layers") or 0)]
    return next((p for p in range(1, len(types) + 1) if all(t == types[i % p] for i, t in enumerate(types))), 1)


def quarter_depth(name: str, tiny: bool) -> int:
    """The reference depth: a quarter of the depth rounded up to whole repeating blocks. A
    program at a depth whose scans run once compiles faster for a reason that is not depth:
    XLA removes a loop of one trip (gemma-4-E4B's decide: 10 layers, each segment one block,
    compiles in about 5.5-7 s; 12, 24 and 42 layers in 7-9 s, not growing with depth)."""
    period = _period(name, tiny)
    return min(_depth(name, tiny), -(-max(1, _depth(name, tiny) // 4) // period) * period)


def _abstract_model(name: str, tiny: bool, layers: int | None) -> Model:
    cfg, params = configs.abstract_from_hf(_hf(name, tiny, layers), jnp.bfloat16)
    fam = configs._family(configs._text(_hf(name, tiny, None))["model_type"])
    return Model(config=cfg, params=params, tokenizer=None, family=fam, source=f"abstract:{name}")


def _abstract(fn):
    """Run a case builder under `jax.eval_shape`: (its non-array outputs, its arrays as shapes)."""
    held = {}

    def arrays():
        out = fn()
        held["out"] = out
        return [x for x in out if _is_tree_of_arrays(x)]

    shapes = jax.eval_shape(arrays)
    it = iter(shapes)
    return [next(it) if _is_tree_of_arrays(x) else x for x in held["out"]]


def _is_tree_of_arrays(x) -> bool:
    leaves = jax.tree.leaves(x)
    return bool(leaves) and all(hasattr(leaf, "shape") and hasattr(leaf, "dtype") for leaf in leaves)


def lower(program: str, model: Model, seeds: int, tokens: int, decisions: int):
    """The jitted program `program` of `model` lowered from abstract arguments."""
    if program == "decide":
        policy, bank, rows, inputs, keys, _ = _abstract(lambda: gpu.decide_case(model, 2, seeds, tokens))
        rows = jax.ShapeDtypeStruct(rows.shape, jnp.int32)
        return policy._decide.lower(model.params, bank, None, rows, inputs, keys, False)
    update, bank, state, batch, keys, _, _ = _abstract(lambda: gpu.update_case(model, seeds, decisions, tokens))
    return update.lower(model.params, bank, state, batch, keys, jax.ShapeDtypeStruct((), jnp.int32))


def measure(program: str, model: Model, seeds: int, tokens: int, decisions: int) -> dict:
    t0 = time.perf_counter()
    lowered = lower(program, model, seeds, tokens, decisions)
    t1 = time.perf_counter()
    lowered.compile()
    t2 = time.perf_counter()
    return {"layers": model.config.num_layers, "lower_s": round(t1 - t0, 2), "compile_s": round(t2 - t1, 2),
            "total_s": round(t2 - t0, 2), "hlo_kb": round(len(lowered.as_text()) / 1024, 1)}


def _fastest(a: dict | None, b: dict) -> dict:
    return b if a is None or b["total_s"] < a["total_s"] else a


def bench(name: str, program: str, args) -> dict:
    quarter = quarter_depth(name, args.tiny)
    # Warm-up, not counted: the first compile of a program in a process also pays for tracing
    # and XLA's one-time setup, which would land on whichever depth is measured first.
    measure(program, _abstract_model(name, True, None), 1, 32, 8)
    full = part = None
    for _ in range(args.repeats):                   # interleaved; the fastest of each is kept
        full = _fastest(full, measure(program, _abstract_model(name, args.tiny, None), args.seeds,
                                      args.prompt_tokens, args.decisions))
        part = _fastest(part, measure(program, _abstract_model(name, args.tiny, quarter), args.seeds,
                                      args.prompt_tokens, args.decisions))
    row = {"backbone": name, "program": program, "full": full, "quarter": part,
           "ratio": round(full["total_s"] / max(part["total_s"], 1e-9), 2)}
    print(f"{name} {program}: {full['total_s']:.1f} s at {full['layers']} layers, {part['total_s']:.1f} s at "
          f"{part['layers']} (x{row['ratio']:.2f}), HLO {full['hlo_kb']:.0f} kB", file=sys.stderr, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m omjax.bench compile", description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(BACKBONES), choices=BACKBONES)
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=PROGRAMS)
    ap.add_argument("--tiny", action="store_true", help="test-sized configs, short prompts (a smoke run)")
    ap.add_argument("--seeds", type=int, default=5, help="seed groups of rows / adapters (paper: 5)")
    ap.add_argument("--prompt-tokens", type=int, default=None, help="prompt length (default 768; --tiny 32)")
    ap.add_argument("--decisions", type=int, default=16, help="decisions per adapter in the update")
    ap.add_argument("--repeats", type=int, default=2, help="compiles per depth, interleaved; the fastest is kept")
    args = ap.parse_args(argv)
    if args.prompt_tokens is None:
        args.prompt_tokens = 32 if args.tiny else 768
    if args.tiny:
        args.seeds, args.decisions, args.repeats = min(args.seeds, 1), min(args.decisions, 8), 1
    jax.config.update("jax_enable_compilation_cache", False)
    rows = [bench(name, program, args) for name in args.models for program in args.programs]
    print(json.dumps({"bench": "compile", "backend": jax.default_backend(), "tiny": args.tiny, "seeds": args.seeds,
                      "prompt_tokens": args.prompt_tokens, "decisions": args.decisions, "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
