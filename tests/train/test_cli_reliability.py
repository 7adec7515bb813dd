"""`omjax train` / `omjax eval` as a user meets them: no run is overwritten, broken checkpoints
fall back, bad input gets one line and exit code 2, Ctrl-C leaves a resumable run."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omjax.config import ConfigError
from omjax.eval import cli as eval_cli
from omjax.train import cli as train_cli
from omjax.train.checkpoint import MANIFEST
from tests.eval.tiny_model import write_tiny_llama

CONFIG = "configs/quickstart_overcooked_smollm2.yaml"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_cli"))


def small(tiny_dir, out_dir, *extra) -> list[str]:
    """The quick-start config on the tiny model: 3-step episodes, 2 rollouts, 1 round."""
    return ["--config", str(REPO / CONFIG), f"model.name={tiny_dir}", f"run.out_dir={out_dir}", "lora.top_layers=0",
            "env.horizon=3", "train.rounds=1", "train.update_rows=0", "train.update_tokens=0", "run.progress=false",
            "run.plot_every=100", *extra]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_fresh_run_never_writes_into_a_finished_run(tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"round": 0}\n')
    assert train_cli.main(small(tiny_dir, run)) == 2
    err = one_line_error(capsys)
    assert f"--resume {run}" in err and "--overwrite" in err
    assert (run / "metrics.jsonl").read_text() == '{"round": 0}\n'


@pytest.mark.parametrize("override, key", [
    ("env.layout=no_such_layout", "env.layout: no Overcooked layout 'no_such_layout'"),
    ("env.n_agents=3", "env.n_agents: must be 2"),
    ("policy.action_interface=compound_json", "policy.decision_mode:"),
    ("lora.targets=[qkv]", "lora.targets: unknown LoRA targets ['qkv']"),
    ("lora.top_layers=9", "lora.top_layers: 9 but model"),
    ("model.name=/nonexistent/model.gguf", "model.name: no model at /nonexistent/model.gguf"),
    ("env.game=cleanup", "env.layout: game 'cleanup' has no layout 'asymmetric_advantages': expected"),
])
def test_bad_input_is_one_line_naming_the_key_with_exit_code_2(tiny_dir, tmp_path, capsys, override, key):
    t0 = time.perf_counter()
    assert train_cli.main(small(tiny_dir, tmp_path / "run", override)) == 2
    assert time.perf_counter() - t0 < 10  # no model or engine was loaded
    assert key in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_a_corrupt_model_file_is_named_and_debug_shows_the_traceback(tiny_dir, tmp_path, capsys):
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model\n")
    argv = small(tiny_dir, tmp_path / "run", f"model.name={fake}")
    assert train_cli.main(argv) == 2
    assert f"model.name: {fake} is not a GGUF file" in one_line_error(capsys)
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        train_cli.main([*argv, "--debug"])


def _truncate_largest_file(checkpoint: Path) -> None:
    files = [f for f in checkpoint.rglob("*") if f.is_file() and f.name != MANIFEST]
    victim = max(files, key=lambda f: f.stat().st_size)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])


@pytest.mark.slow
def test_overwrite_then_broken_checkpoints_fall_back_to_the_newest_intact_one(tiny_dir, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "decisions").mkdir(parents=True)
    (run / "decisions" / "round_0009.jsonl").write_text("stale\n")
    assert train_cli.main([*small(tiny_dir, run, "train.rounds=2"), "--overwrite"]) == 0
    assert not (run / "decisions" / "round_0009.jsonl").exists()
    assert [json.loads(r)["round"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["1", "2"]
    capsys.readouterr()

    # The newest checkpoint loses half of a file: eval --which latest and resume use round 1's.
    _truncate_largest_file(run / "checkpoints" / "2")
    assert eval_cli.main(["--checkpoint", str(run), "--which", "latest", "--seeds", "10000", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"skipped checkpoint {run / 'checkpoints' / '2'}:" in out and "bytes" in out
    assert f"restored the latest checkpoint {run / 'checkpoints' / '1'}" in out

    assert train_cli.main(["--resume", str(run), "train.rounds=3"]) == 0
    out = capsys.readouterr().out
    assert f"skipped checkpoint {run / 'checkpoints' / '2'}:" in out
    assert f"resuming after round 1 from {run / 'checkpoints' / '1'}" in out
    assert [json.loads(r)["round"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["2", "3"]

    # A deleted orbax metadata file in every checkpoint: one line, exit 2, no traceback.
    for step in ("2", "3"):
        (run / "checkpoints" / step / "meta" / "metadata").unlink()
    assert train_cli.main(["--resume", str(run), "train.rounds=4"]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"omjax train: no intact latest checkpoint under {run / 'checkpoints'}")
    assert "meta/metadata is missing" in err


@pytest.mark.slow
def test_ctrl_c_stops_within_seconds_and_leaves_a_resumable_run(tiny_dir, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "omjax.cli", "train", *small(tiny_dir, run, "train.rounds=1000"), "--no-compile-cache"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 240
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2) and time.time() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    t0 = time.time()
    _, err = proc.communicate(timeout=60)
    assert time.time() - t0 < 10, "Ctrl-C took more than a few seconds"
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("omjax train: interrupted in round ") and last.endswith(f"omjax train --resume {run}")
    assert "Traceback" not in err
    finished = len(metrics.read_text().splitlines())
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir())[-1] == finished

    resumed = subprocess.run([sys.executable, "-m", "omjax.cli", "train", "--resume", str(run),
                              f"train.rounds={finished + 1}", "--no-compile-cache"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after round {finished} from {run / 'checkpoints' / str(finished)}" in resumed.stdout
    assert [json.loads(r)["round"] for r in metrics.read_text().splitlines()] == list(range(finished + 1))


@pytest.mark.parametrize("flags, message", [
    (["--coordinator", "host0:1234"], "--coordinator, --num-processes and --process-id go together"),
    (["--coordinator", "host0:1234", "--num-processes", "2", "--process-id", "2"],
     "--process-id 2 must be in 0 .. --num-processes - 1 (2 processes)"),
])
def test_bad_multi_host_flags_are_one_line(flags, message, capsys):
    assert train_cli.main(["--config", CONFIG, *flags]) == 2
    assert capsys.readouterr().err.strip() == f"omjax train: {message}"
