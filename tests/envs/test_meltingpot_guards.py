"""Melting Pot menus: the vectorised guard evaluators (NumPy `menu.hidden_mask`, JAX
`menu.hidden_mask_jax` through `omjax.options.meltingpot.hidden_mask_batch_jax`) equal the guard-by-guard
Python definition on >= 1,000 recorded states of each game, every agent, both libraries."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from omjax.envs.meltingpot import make
from omjax.options import meltingpot as mp
from omjax.options.menu import GuardTable, hidden_mask, hidden_mask_reference
from omjax.games.registry import guard_path, library
from omjax.options.synthesis import REASON_KEY, Guard, read_guards

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "meltingpot")


def _load_states(game):
    spec = importlib.util.spec_from_file_location("record_states", os.path.join(DATA, "record_states.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load_states(os.path.join(DATA, f"states_{game}.npz"))


@pytest.mark.parametrize("game", ["cleanup", "harvest"])
def test_jax_and_numpy_guard_evaluators_equal_python_on_recorded_states(game):
    module = library(game)
    states = _load_states(game)
    assert len(states) >= 1000
    env = make(game)
    ctx = mp.make_ctx(env, module.regions(env))
    hidden_any = explicit_hits = 0
    for v, variant in enumerate(module.VARIANTS):
        lib = module.library(variant)
        # The shipped guards plus an explicit guard for every typed failure each option declares,
        # so the `live` half of the evaluator is exercised too.
        guards = mp.own_guards(lib, read_guards(guard_path(game, variant), module.SCHEMA))
        guards += [Guard(spec.name, "explicit", {REASON_KEY: r.name}, 5)
                   for spec in lib.schema.options for r in spec.reasons]
        table = GuardTable.from_guards(lib.schema, guards)
        # Alternate the libraries over the states: every state is checked, every agent.
        decisions = [(s, a) for k, s in enumerate(states) if k % 2 == v for a in range(ctx.num_agents)]
        batch = mp.menu_batch(lib, ctx, decisions)
        jax_hidden = mp.hidden_mask_batch_jax(table, batch)
        for n, insts in enumerate(batch.instances):
            m = len(insts)
            ref = hidden_mask_reference(lib.schema, guards, insts, batch.feats[n, :m], batch.live[n, :m])
            assert np.array_equal(hidden_mask(lib.schema, guards, insts, batch.feats[n, :m], batch.live[n, :m]), ref)
            assert np.array_equal(jax_hidden[n, :m], ref), (variant, n)
            assert not jax_hidden[n, m:].any()
            hidden_any += int(ref.any())
            explicit_hits += int(batch.live[n, :m].any())
    assert hidden_any > 100  # the guards do hide things on these states
    if game == "harvest":
        assert explicit_hits > 0  # dead patches: NoPath on harvest_patch


@pytest.mark.slow
@pytest.mark.parametrize("game", ["cleanup", "harvest"])
def test_guard_files_regenerate_byte_identical_in_fresh_processes(game, tmp_path):
    """`omjax guards --game <game> --layout <variant>` from a fresh burn-in, in its own process,
    writes exactly the shipped guard file, for every variant (each burn-in episode runs in a fork
    of one canonical process with LuaJIT's PRNG pinned: `omjax.envs.meltingpot.isolated`).

    The records can depend on the bytes of every module that process imports (they shape its
    heap, and the engine's output depends on heap addresses), so an edit under omjax/options or
    omjax/envs may change them: then regenerate the shipped files (`omjax guards --game <game>
    --layout <variant>`, or `python -m omjax.games.coverage --save-records` + `omjax guards
    --records`) and the recorded burn-ins under tests/data/meltingpot.

    Runtime: one default burn-in per variant (clean_up 7 + 7, Commons Harvest 8 + 8 episodes);
    about 1 min per clean_up variant and 1-2 min per Commons Harvest variant on a quiet 2-core
    machine (slow-marked)."""
    import subprocess
    import sys

    for variant in library(game).VARIANTS:
        out = tmp_path / f"{game}_{variant}.jsonl"
        subprocess.run([sys.executable, "-m", "omjax", "guards", "--game", game, "--layout", variant,
                        "--quiet", "--out", str(out)], check=True, capture_output=True)
        with open(guard_path(game, variant), "rb") as shipped:
            assert out.read_bytes() == shipped.read(), (game, variant)
