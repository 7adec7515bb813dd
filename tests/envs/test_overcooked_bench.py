"""Tiny-budget smoke run of `python -m omjax.bench env` (the real figures come from the full run)."""

from __future__ import annotations

import json

# Imported here, not inside the test: importing jaxmarl (which omjax.envs uses) while pytest
# captures output rebinds sys.stdout to the real terminal, and capsys would then see nothing.
import omjax.envs.overcooked  # noqa: F401
from omjax.bench.env import main


def test_env_benchmark_prints_both_rates_and_a_json_line(capsys):
    # XLA's thread flags cannot change once this test process has started JAX, so keep its default.
    assert main(["--batch", "16", "--steps", "8", "--rounds", "2", "--ref-seconds", "0.2",
                 "--xla-threads", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    record = json.loads(lines[-1])
    assert record["bench"] == "env" and record["batch"] == 16 and record["layout"] == "asymmetric_advantages"
    assert record["ours_steps_per_s"] > 0 and record["reference_steps_per_s"] > 0
    assert abs(record["ratio"] - record["ours_steps_per_s"] / record["reference_steps_per_s"]) < 0.1 * record["ratio"] + 1
    assert any(line.startswith("overcooked_ai_py 1.1.0") for line in lines)
    assert any(line.startswith("ratio ours / reference") for line in lines)
