"""Tiny smoke runs of the device-check scripts (`experiments/gpu_check.sh`,
`experiments/paper_scale_smollm2.sh`) on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.eval.conftest import tiny_model_dir  # noqa: F401  (the tiny random Llama on disk)

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = {**os.environ, "PYTHON": sys.executable, "JAX_PLATFORMS": "cpu", **extra}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(ROOT)
    return env


def test_gpu_check_part_a_tiny_writes_each_step(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "experiments" / "gpu_check.sh"), str(tmp_path), "a"],
                          env=_env(OMJAX_GPU_CHECK_TINY="1"), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.json", "log.txt", "round_qwen3-4b.json"]
    env = json.loads((tmp_path / "env.json").read_text().strip().splitlines()[-1])
    assert env["env"]["steps_per_s"] > 0
    rnd = json.loads((tmp_path / "round_qwen3-4b.json").read_text())
    assert rnd["tiny"] and rnd["rounds"][0]["collect"]["decisions_per_s"] > 0 and "projection" in rnd
    assert rnd["vs_peft"]["decisions"] == 4 and rnd["vs_peft"]["decisions_per_s_peft"] > 0
    assert "== round_qwen3-4b exit 0" in (tmp_path / "log.txt").read_text()


def test_gpu_check_rejects_an_unknown_part(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "experiments" / "gpu_check.sh"), str(tmp_path), "c"], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "part must be a or b" in done.stderr


def test_paper_scale_smollm2_tiny_trains_then_evaluates_both_teams_on_held_out_seeds(tiny_model_dir, tmp_path):
    done = subprocess.run(["bash", str(ROOT / "experiments" / "paper_scale_smollm2.sh"), str(tiny_model_dir),
                           str(tmp_path), "--tiny"], env=_env(OMJAX_CACHE=str(tmp_path / "cache")),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    settings = (tmp_path / "settings.txt").read_text()
    assert "train.lr=2e-4" in settings and "env.reward_shaping=0.0" in settings
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds_trained"] == 2 and summary["seeds"] == [11000, 11001]
    for team in ("frozen", "trained"):
        assert len(summary[team]["deliveries"]) == 2 and len(summary[team]["ci95"]) == 2
        assert (tmp_path / f"eval_{team}" / "report.md").is_file()
    assert 0.0 <= summary["mann_whitney"]["p_value"] <= 1.0
