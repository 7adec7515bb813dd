"""The analytic FLOP model of a round (`omjax.bench.flops`) against hand-computed counts."""

import numpy as np
import pytest

from omjax.bench import flops as F

# A toy decoder: 100 matmul weights, one attention layer of 8 query channels, d = 4, V = 10,
# 6 adapter weights.
DIMS = F.Dims(matmul=100, attention=(8,), hidden=4, vocab=10, lora=6)


def test_one_pass_forward_and_backward_by_hand():
    p = F.Pass(rows=2, queries=3, keys=5, logits=1)  # 6 tokens
    # weights 2*100*6, attention 4*8 per (query, key) pair * 6*5, LoRA 2*6*6, LM head 2*4*10 * 2 rows
    assert F.forward_flops(DIMS, p) == 1200 + 960 + 72 + 160
    assert F.forward_flops(DIMS, F.Pass(2, 3, 5, 1, adapted=False)) == 1200 + 960 + 160
    # activation grads through the weights (1x), attention (2x), LoRA (2x), LM head (1x)
    assert F.backward_flops(DIMS, p) == 1200 + 1920 + 144 + 160


def test_round_of_the_current_update_by_hand():
    w = F.Workload(adapters=1, decisions=2, prompt=5, prefix=2, block=2, minibatch=2)
    out = F.round_flops(DIMS, w, F.Plan(epochs=2, remat=1.0))
    assert out["rollout_prefill"] == 400 + 128 + 24 + 80          # 2 prefix tokens, 1 logit
    assert out["rollout_decide"] == 2000 + 2240 + 120 + 480      # 2 rows x (3 + 2) tokens on 7 keys, 3 logits
    assert out["rollout_decode"] == 0
    assert out["reference"] == 2800 + 3136 + 480                 # 2 whole rows of 7 tokens, no adapter
    assert out["old_logp"] == 0
    assert out["epoch_forward"] == out["remat"] == 2 * (6416 + 168)
    assert out["backward"] == 2 * (2800 + 6272 + 336 + 480)
    assert out["update"] == 6416 + 13168 + 13168 + 19776
    assert out["total"] == out["update"] + out["rollout"]
    # no remat: the recomputation goes; old log-probs scored in the update: one more adapted pass
    lean = F.round_flops(DIMS, w, F.Plan(epochs=2, remat=0.0, old_from_rollouts=False))
    assert lean["remat"] == 0 and lean["old_logp"] == 6584


def test_round_of_the_shared_prefix_plan_by_hand():
    w = F.Workload(adapters=1, decisions=2, prompt=5, prefix=2, block=2, minibatch=2)
    out = F.round_flops(DIMS, w, F.Plan(epochs=2, remat=0.0, shared_prefix=True))
    # rows: 5 own tokens on 7 keys; the prefix (2 tokens) once per minibatch (1 here), for the
    # reference and in each epoch
    assert out["reference"] == (2000 + 2240 + 480) + (400 + 128)
    assert out["epoch_forward"] == 2 * ((4720 + 120) + (528 + 24))
    assert out["backward"] == 2 * ((2000 + 4480 + 240 + 480) + (400 + 256 + 48))
    assert out["update"] == 5248 + 10784 + 15808
    before = F.round_flops(DIMS, w, F.Plan(epochs=2, remat=1.0))
    assert out["update"] < 0.75 * before["update"]


def test_remat_fraction_recomputes_only_what_does_not_fit():
    assert F.remat_fraction(100, 40, 120) == 0.0
    assert F.remat_fraction(100, 40, 70) == pytest.approx(0.5)
    assert F.remat_fraction(100, 40, 30) == 1.0


def test_dims_of_a_parameter_tree():
    layers = [{"q": np.zeros((4, 8)), "o": np.zeros((8, 4)), "norm": np.zeros(4)},  # attention
              {"qkv": np.zeros((4, 12)), "norm": np.zeros(4)}]                    # recurrent
    shapes = [{"q": (4, 8), "o": (8, 4)}, {"qkv": (4, 12)}]
    d = F.dims_of({"embed": np.zeros((10, 4)), "layers": layers}, shapes, ("q",), rank=2, hidden=4, vocab=10)
    assert d == F.Dims(matmul=32 + 32 + 48, attention=(8,), hidden=4, vocab=10, lora=2 * (4 + 8))


def test_peaks_by_device_kind():
    assert F.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert F.peak_tflops("NVIDIA H200") == 989.0
    assert F.peak_tflops("cpu") is None


def test_a_family_without_branch_masks_runs_the_prompt_once_per_branch():
    # 2 branches of 1 token each on their own copy: 4 rows of (3 suffix + 1 branch) tokens on 6 keys, 2 logits
    w = F.Workload(adapters=1, decisions=2, prompt=5, prefix=2, block=2, minibatch=2, copies=2)
    out = F.round_flops(DIMS, w, F.Plan(epochs=1, remat=0.0))
    assert out["rollout_decide"] == F.forward_flops(DIMS, F.Pass(4, 4, 6, 2))
    assert out["reference"] == F.forward_flops(DIMS, F.Pass(4, 6, 6, 2, adapted=False))
