"""Tiny-budget smoke runs of `python -m omjax.bench env` (the real figures come from the full run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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


def test_one_thread_set_up_gives_every_thread_back_all_cpus():
    # The set-up holds the process to one CPU while XLA starts its threads; on Linux each thread
    # keeps its own affinity, so the pool running the devices' computations stayed on that one CPU
    # (2 devices ran no faster than 1) until every thread was given the CPUs back.
    code = ("import os\n"
            "from omjax.bench.env import start_backend\n"
            "cpus = os.sched_getaffinity(0)\n"
            "start_backend(2, True)\n"
            "import jax, jax.numpy as jnp\n"
            "jax.block_until_ready([jax.device_put(jnp.ones(4), d) * 2 for d in jax.devices()])\n"
            "assert len(jax.devices()) == 2\n"
            "bad = [t for t in os.listdir('/proc/self/task') if os.sched_getaffinity(int(t)) != cpus]\n"
            "assert not bad, (cpus, {t: os.sched_getaffinity(int(t)) for t in bad})\n")
    if not (hasattr(os, "sched_getaffinity") and os.path.isdir("/proc/self/task") and len(os.sched_getaffinity(0)) > 1):
        pytest.skip("needs Linux thread affinities and more than one CPU")
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
