"""Tiny-budget smoke runs of `python -m omjax.bench env` (the real figures come from the full run)."""

from __future__ import annotations

import json
import subprocess
import sys

# Imported here, not inside the test: importing jaxmarl (which omjax.envs uses) while pytest
# captures output rebinds sys.stdout to the real terminal, and capsys would then see nothing.
import omjax.envs.overcooked  # noqa: F401
from omjax.bench.env import main

TINY = ["--batch", "16", "--steps", "8", "--rounds", "2", "--ref-seconds", "0.2"]


def check_record(lines: list[str], devices: int) -> dict:
    record = json.loads(lines[-1])
    assert record["bench"] == "env" and record["batch"] == 16 and record["layout"] == "asymmetric_advantages"
    assert record["devices"] == devices
    assert record["ours_steps_per_s"] > 0 and record["reference_steps_per_s"] > 0
    assert abs(record["ratio"] - record["ours_steps_per_s"] / record["reference_steps_per_s"]) < 0.1 * record["ratio"] + 1
    assert abs(record["ratio_per_device"] - record["ratio"] / devices) < 0.1 * record["ratio"] + 1
    assert any(line.startswith("overcooked_ai_py 1.1.0") for line in lines)
    assert any(line.startswith("ratio ours / reference") for line in lines)
    return record


def test_env_benchmark_prints_both_rates_and_a_json_line(capsys):
    # JAX's backend (one CPU device) already runs in this test process, so use it as it is.
    assert main([*TINY, "--devices", "1", "--xla-threads", "0"]) == 0
    check_record(capsys.readouterr().out.strip().splitlines(), devices=1)


def test_env_benchmark_splits_the_batch_over_devices_in_a_fresh_process():
    # The default set-up (several CPU devices, one XLA thread each) needs a process of its own.
    out = subprocess.run([sys.executable, "-m", "omjax.bench", "env", *TINY, "--devices", "2"],
                         capture_output=True, text=True, timeout=600, check=True).stdout
    check_record(out.strip().splitlines(), devices=2)
