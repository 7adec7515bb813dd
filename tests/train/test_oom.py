"""Running out of device memory as one line (`omjax.train.oom`)."""

import jax
import pytest

from omjax.train import oom
from tests.eval.conftest import tiny_model_dir  # noqa: F401  (the tiny random Llama on disk)

EST = {"total": 30 * oom.GIB, "base": 8 * oom.GIB, "base_gib": 8.0, "activations_gib": 20.0, "kv_cache_gib": 1.5,
       "lora_gib": 0.02}


def test_oom_line_names_the_phase_the_estimate_the_device_and_what_to_lower():
    err = RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 123 bytes.\nBuffer dump ...")
    line = oom.oom_line("update", err, EST, 16 * oom.GIB)
    assert "\n" not in line and "Buffer dump" not in line
    assert line.startswith("out of device memory in the update (RESOURCE_EXHAUSTED: Out of memory while trying")
    assert "memory_estimate 30.0 GiB, a device has 16.0 GiB" in line
    for setting in ("train.minibatch_size", "train.update_tokens", "train.remat"):
        assert setting in line
    assert "train.rollouts" in oom.oom_line("rollouts", err, None, None)
    assert "device memory unknown" in oom.oom_line("start", "", None, None)


def test_plan_line_and_model_axis_split_the_base():
    line = oom.plan_line(EST, 2, 16 * oom.GIB)
    assert "26.0 GiB per device (the base split over 2 devices)" in line and "a device has 16.0 GiB" in line


def test_only_xla_allocation_failures_count_as_out_of_memory():
    kind = jax.errors.JaxRuntimeError
    assert oom.out_of_memory(kind("RESOURCE_EXHAUSTED: Out of memory allocating 2 GiB"))
    assert not oom.out_of_memory(kind("INVALID_ARGUMENT: bad shape"))
    assert not oom.out_of_memory(ValueError("Out of memory"))  # not XLA's


def test_phase_of_reads_the_innermost_omjax_frame():
    def collect_group():
        raise RuntimeError("x")

    collect_group.__code__ = collect_group.__code__.replace(co_filename="/x/omjax/train/rollout.py")
    with pytest.raises(RuntimeError) as caught:
        collect_group()
    assert oom.phase_of(caught.value) == "rollouts"
    assert oom.phase_of(RuntimeError("no traceback")) == "start"


def test_train_refuses_a_plan_that_cannot_fit_before_loading_the_model(tiny_model_dir, tmp_path, monkeypatch,
                                                                       capsys):
    from omjax.train import cli, launch

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(launch, "Trainer", no_model)
    monkeypatch.setenv(oom.MEMORY_ENV, str(2 ** 20))  # a 1 MiB device
    code = cli.main(["--config", "configs/quickstart_overcooked_smollm2.yaml", f"model.name={tiny_model_dir}",
                     f"run.out_dir={tmp_path / 'run'}", "lora.top_layers=0", "--no-compile-cache"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("omjax train: the plan needs about")
    assert "a device has 0.0 GiB" in err and "train.remat" in err
    assert not (tmp_path / "run").exists()  # refused before claiming the run directory


def test_remat_auto_recomputes_the_fewest_layers_that_fit(tiny_model_dir):
    """`train.remat=auto`: no layer where the update fits, every layer where only that fits, and
    in between the fewest bottom layers whose recomputation brings the estimate under the device."""
    from omjax.config import load_config
    from omjax.models import loader

    cfg = load_config("configs/quickstart_overcooked_smollm2.yaml", [f"model.name={tiny_model_dir}"])
    model_cfg = loader.load_config(tiny_model_dir)
    n = model_cfg.num_layers
    total = lambda k: oom._estimate(cfg, model_cfg, 1, k)["total"]
    assert [total(k) for k in range(n + 1)] == sorted((total(k) for k in range(n + 1)), reverse=True)
    assert total(0) == oom._estimate(cfg, model_cfg, 1, False)["total"] > total(n) == oom._estimate(
        cfg, model_cfg, 1, True)["total"]
    plan = lambda limit: oom.planned_remat(cfg, model_cfg, 1, 1, limit)
    assert plan(None) == 0 and plan(int(total(0))) == 0
    assert plan(int(total(n))) == n and plan(int(total(n)) - 1) is True
    mid = int(total(1)) - 1  # one layer is not enough, two are
    assert plan(mid) == 2 and total(2) <= mid < total(1)
    fixed = load_config("configs/quickstart_overcooked_smollm2.yaml", [f"model.name={tiny_model_dir}", "train.remat=true"])
    assert oom.planned_remat(fixed, model_cfg, 1, 1, None) is True
