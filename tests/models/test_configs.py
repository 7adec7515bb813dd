"""The published configs of the paper's four backbones, their real-shape parameter trees, and
`python -m omjax.bench gpu --tiny` (the H100 bench's own code on test-sized configs)."""

import json

import jax
import numpy as np
import pytest

pytest.importorskip("transformers")

from omjax.bench import gpu  # noqa: E402
from omjax.models import configs, memory_estimate  # noqa: E402

# Parameter counts of the text decoders (embeddings once when tied; gemma-4 counts its per-layer
# input table, which the "E" in E2B/E4B leaves out of the effective size).
N_PARAMS = {"qwen3-4b-instruct-2507": 4.02e9, "qwen3.5-2b": 1.88e9, "gemma-4-e2b-it": 4.63e9,
            "gemma-4-e4b-it": 7.46e9}


@pytest.mark.parametrize("name", sorted(configs.PUBLISHED))
def test_real_shape_tree_matches_the_config_parameter_count(name):
    cfg, tree = configs.abstract_params(name)
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))
    # gemma-4's `n_params` leaves out its one scalar per layer (`layer_scalar`).
    assert 0 <= count - cfg.n_params <= cfg.num_layers
    assert cfg.n_params == pytest.approx(N_PARAMS[name], rel=2e-3)
    assert {x.dtype for x in jax.tree.leaves(tree)} == {np.dtype("bfloat16")}
    est = memory_estimate(cfg, 10, 16, 8, 768, parallel_agents=True)
    assert est["base"] == 2 * cfg.n_params


def test_unknown_backbone_is_named():
    with pytest.raises(ValueError, match="unknown backbone 'qwen9'"):
        configs.published("qwen9")


def test_bench_gpu_tiny_runs_every_measure(capsys):
    assert gpu.main(["--tiny", "--models", "qwen3-4b-instruct-2507", "--seeds", "2"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["bench"] == "gpu" and out["tiny"] and out["backend"] == "cpu"
    (row,) = out["backbones"]
    assert row["decide_A2"]["decisions"] == 2 * 2 * 6 and row["decide_A7"]["decisions"] == 2 * 7 * 4
    assert row["decide_A7"]["adapters"] == 14
    for key in ("decide_A2", "decide_A7"):
        assert row[key]["decisions_per_s"] > 0
    assert row["update"]["finite"] and row["update"]["update_s"] > 0 and row["update"]["adapters"] == 4
    assert row["update"]["estimate_bytes"] > 0
    assert out["env"]["steps_per_s"] > 0


@pytest.mark.slow
def test_bench_gpu_tiny_all_backbones(capsys):
    assert gpu.main(["--tiny", "--seeds", "2", "--no-env"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["backbone"] for r in out["backbones"]] == list(configs.PUBLISHED)
    assert all(r["update"]["finite"] for r in out["backbones"])


def test_gpu_check_report_merges_the_per_backbone_lines(capsys, tmp_path):
    assert gpu.main(["--tiny", "--models", "qwen3.5-2b", "--seeds", "1", "--env-only"]) == 0
    (tmp_path / "env.jsonl").write_text(capsys.readouterr().out)
    row = {"backbone": "qwen3.5-2b", "params": 1.9e9, "peak_bytes": 3 * 2 ** 30,
           "decide_A2": {"decisions_per_s": 100.0}, "decide_A7": {"decisions_per_s": 50.0},
           "update": {"update_s": 1.5, "compile_s": 40.0, "estimate_bytes": 2 ** 31, "adapters": 10, "seeds": 5,
                      "agents": 2, "decisions_per_adapter": 16, "prompt_tokens": 768, "rank": 16, "epochs": 2,
                      "minibatch": 8}}
    (tmp_path / "qwen3.5-2b.jsonl").write_text(json.dumps({"bench": "gpu", "backbones": [row]}) + "\n")
    (tmp_path / "gemma-4-e2b-it.jsonl").write_text(json.dumps(
        {"bench": "gpu", "backbones": [{"backbone": "gemma-4-e2b-it", "error": "failed or over 105s"}]}) + "\n")
    assert gpu.main(["--report", str(tmp_path)]) == 0
    merged = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [r["backbone"] for r in merged["backbones"]] == ["qwen3.5-2b", "gemma-4-e2b-it"]
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| qwen3.5-2b | 1.90 B | 100 | 50 | 1.50 (40) | 3.0 | 2.0 |" in report
    assert "| gemma-4-e2b-it | failed or over 105s |" in report
    assert "steps/s" in report
