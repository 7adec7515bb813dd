"""The two implementations of `base.attention` side by side: causal attention in query blocks
(`blocked`, the CPU default) against `jax.nn.dot_product_attention` (`fused`, the accelerator
default: cuDNN flash attention on a GPU, one XLA pass over all keys on the CPU), on a SmolLM2
suffix prefill through the shared-prefix cache (the decision path's shape).

    python -m omjax.bench attention [--lengths 512,768] [--repeats 3]

Both programs run in one process, interleaved; each is traced with `base.ATTENTION` set to its
implementation (restored after), so they are the same forward but for the attention. Prints
best times, their ratio (fused / blocked seconds) and the largest logit difference, then one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m omjax.bench attention", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--prefix", type=int, default=121, help="cached shared-prefix tokens (Overcooked's)")
    ap.add_argument("--lengths", default="512,768", help="suffix lengths (comma-separated)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    from omjax.models import base, inference, load

    m = load(args.model, with_tokenizer=False)
    rng = np.random.RandomState(0)
    pt, pm = inference.prefix_arrays(rng.randint(0, 1000, args.prefix).tolist())
    pc = inference.prefill(m.family, m.params, m.config, jnp.asarray(pt), jnp.asarray(pm))
    res = {"bench": "attention", "model": args.model, "rows": args.rows, "prefix": args.prefix,
           "query_block": base.QUERY_BLOCK, "backend": jax.default_backend(),
           "default": base.attention_implementation()}
    print(f"{'suffix tokens':>14s}{'blocked s':>11s}{'fused s':>12s}{'ratio':>8s}{'max |dlogit|':>14s}")
    for t in [int(x) for x in args.lengths.split(",")]:
        lens = [t - (17 * i) % (t // 3) for i in range(args.rows)]  # left-padded rows of unequal length
        tok, mask = inference.left_pad([rng.randint(0, 1000, n).tolist() for n in lens], length=t)

        def program():
            return jax.jit(lambda p, c, x, mk: m.family.forward(
                p, m.config, x, attention_mask=mk, cache=inference.extend_for(c, args.rows, t))[0])

        fns, chosen = {}, base.ATTENTION
        try:
            for name in base.ATTENTION_IMPLEMENTATIONS:
                base.ATTENTION = name
                fns[name] = program()
                fns[name](m.params, pc, tok, mask).block_until_ready()  # compile under this implementation
        finally:
            base.ATTENTION = chosen
        best = {k: float("inf") for k in fns}
        for _ in range(args.repeats):
            for k, f in fns.items():
                t0 = time.perf_counter()
                f(m.params, pc, tok, mask).block_until_ready()
                best[k] = min(best[k], time.perf_counter() - t0)
        real = np.asarray(mask).astype(bool)
        diff = float(np.abs(np.asarray(fns["blocked"](m.params, pc, tok, mask))
                            - np.asarray(fns["fused"](m.params, pc, tok, mask)))[real].max())
        ratio = best["fused"] / best["blocked"]
        print(f"{t:14d}{best['blocked']:11.2f}{best['fused']:12.2f}{ratio:8.2f}{diff:14.1e}")
        res[str(t)] = {"blocked_s": best["blocked"], "fused_s": best["fused"], "fused_over_blocked": ratio,
                       "max_abs_logit_diff": diff}
    print(json.dumps(res))
    return 0
