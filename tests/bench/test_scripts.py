"""Tiny smoke runs of the device-check scripts (`experiments/gpu_check.sh`,
`experiments/paper_scale_smollm2.sh`) on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

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
    assert "== round_qwen3-4b exit 0" in (tmp_path / "log.txt").read_text()


def test_gpu_check_rejects_an_unknown_part(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "experiments" / "gpu_check.sh"), str(tmp_path), "c"], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "part must be a or b" in done.stderr
