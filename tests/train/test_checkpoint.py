"""Round checkpoints: sha256 manifests, fallback past broken checkpoints, Ctrl-C held while a
round is written."""

import os
import signal

import jax.numpy as jnp
import numpy as np
import pytest

from omjax.train.checkpoint import MANIFEST, Checkpointer, CheckpointError, TrainState
from omjax.train.trainer import deferred_sigint


def state(round_idx: int) -> TrainState:
    bank = {"layers": [{"q": {"a": jnp.full((2, 4, 2), float(round_idx)), "b": jnp.zeros((2, 2, 4))}}]}
    return TrainState(bank=bank, opt_state={"mu": jnp.ones(3) * round_idx}, key=jnp.zeros(2, jnp.uint32),
                      round=jnp.int32(round_idx), best_return=jnp.float32(round_idx))


def saved_run(tmp_path, rounds=(1, 2, 3)) -> Checkpointer:
    ckpt = Checkpointer(tmp_path, keep=3)
    for r in rounds:
        ckpt.save(state(r), {"round": r}, best=state(r) if r == rounds[-1] else None)
    return ckpt


def test_every_save_writes_a_manifest_and_intact_checkpoints_restore(tmp_path):
    ckpt = saved_run(tmp_path)
    for r in (1, 2, 3):
        assert (tmp_path / "checkpoints" / str(r) / MANIFEST).is_file()
    restored = ckpt.restore(state(0))
    assert restored.step == 3 and restored.skipped == () and restored.meta == {"round": 3}
    np.testing.assert_array_equal(restored.state.bank["layers"][0]["q"]["a"], np.full((2, 4, 2), 3.0))
    assert ckpt.restore(state(0), "best").path == tmp_path / "best" / "3"
    ckpt.close()


@pytest.mark.parametrize("damage, why", [
    ("truncate", "bytes, "),
    ("flip", "does not match its sha256"),
    ("delete_metadata", "meta/metadata is missing"),
])
def test_a_broken_newest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, damage, why):
    ckpt = saved_run(tmp_path)
    newest = tmp_path / "checkpoints" / "3"
    files = sorted((f for f in newest.rglob("*") if f.is_file() and f.name != MANIFEST), key=lambda f: f.stat().st_size)
    if damage == "truncate":
        files[-1].write_bytes(files[-1].read_bytes()[:-7])
    elif damage == "flip":
        data = bytearray(files[-1].read_bytes())
        data[len(data) // 2] ^= 0xFF
        files[-1].write_bytes(bytes(data))
    else:
        (newest / "meta" / "metadata").unlink()
    restored = ckpt.restore(state(0))
    assert restored.step == 2 and float(restored.state.best_return) == 2.0
    assert len(restored.skipped) == 1 and restored.skipped[0].startswith(f"{newest}: ") and why in restored.skipped[0]
    ckpt.discard(restored)
    assert ckpt.latest_round() == 2 and not newest.exists()
    ckpt.save(state(3), {"round": 3})  # the resumed run writes round 3 again
    assert ckpt.restore(state(0)).step == 3
    ckpt.close()


def test_a_checkpoint_without_a_manifest_is_left_to_orbax(tmp_path):
    ckpt = saved_run(tmp_path, rounds=(1, 2))
    (tmp_path / "checkpoints" / "2" / MANIFEST).unlink()
    assert ckpt.restore(state(0)).step == 2
    (tmp_path / "checkpoints" / "2" / "meta" / "metadata").unlink()
    restored = ckpt.restore(state(0))
    assert restored.step == 1 and "orbax cannot read it" in restored.skipped[0]
    assert "\n" not in restored.skipped[0]
    ckpt.close()


def test_no_intact_checkpoint_is_one_error_listing_each(tmp_path):
    ckpt = saved_run(tmp_path, rounds=(1, 2))
    for r in (1, 2):
        (tmp_path / "checkpoints" / str(r) / "meta" / "metadata").unlink()
    with pytest.raises(CheckpointError, match=r"no intact latest checkpoint under .*checkpoints: .*2: .*; .*1: ") as err:
        ckpt.restore(state(0))
    assert "\n" not in str(err.value)
    ckpt.close()


def test_ctrl_c_is_held_until_the_round_is_written():
    # The handler this test expects back; an earlier test in the same worker process may have
    # left another one installed.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    written = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
            written.append("decisions")
            written.append("checkpoint")
    assert written == ["decisions", "checkpoint"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_checkpoint_of_per_layer_adapters_restores_stacked(tmp_path):
    """A round checkpoint written before the layers were stacked (bank and Adam moments in the
    per-layer list layout, the bottom layer bare) restores into today's stacked state, converted."""
    import jax
    import optax

    from omjax.models import lora

    shapes = [{"q": (8, 8), "v": (8, 4)}] * 3
    cfg = lora.LoRAConfig(rank=2, targets=("q", "v"), top_layers=2)
    bank = jax.tree.map(lambda x: x + 0.25, lora.init_lora(jax.random.PRNGKey(0), shapes, cfg, n_agents=2))
    per_layer = lambda b: {"layers": lora.to_layers(b, shapes, agent_axis=True)}  # noqa: E731
    opt = optax.adam(1e-3)
    moments = jax.tree.map(lambda x: 2 * x, bank)
    adam = opt.init(per_layer(bank))
    written = TrainState(bank=per_layer(bank), opt_state=(adam[0]._replace(mu=per_layer(moments)), *adam[1:]),
                         key=jnp.zeros(2, jnp.uint32), round=jnp.int32(4), best_return=jnp.float32(1.5))
    assert written.bank["layers"][0] == {}
    ckpt = Checkpointer(tmp_path, keep=2)
    ckpt.save(written, {"round": 4})
    template = TrainState(bank=jax.tree.map(jnp.zeros_like, bank), opt_state=opt.init(bank), key=jnp.ones(2, jnp.uint32),
                          round=jnp.int32(0), best_return=jnp.float32(0))
    with pytest.raises(CheckpointError, match="orbax cannot read it"):
        ckpt.restore(template)                                     # without the converter: one line, skipped
    restored = ckpt.restore(template, per_layer=per_layer)
    assert restored.meta["converted"].startswith("per-layer adapters") and int(restored.state.round) == 4
    assert jax.tree.structure(restored.state) == jax.tree.structure(template)
    for got, want in zip(jax.tree.leaves(restored.state.bank), jax.tree.leaves(bank)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(jax.tree.leaves(restored.state.opt_state[0].mu), jax.tree.leaves(moments)):
        np.testing.assert_array_equal(got, want)
    ckpt.close()
