"""Menus: the guardless instantiation of an agent, its guard-filtered lettered menu, batched menus."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from omjax.envs.meltingpot.adapter import MeltingPotEnv, SymbolicState
from omjax.options import menu as menu_mod
from omjax.options.meltingpot.features import agent_feature_values, read_codes, targets
from omjax.options.meltingpot.goals import live_memo
from omjax.options.meltingpot.library import MPLibrary
from omjax.options.meltingpot.paths import Ctx, make_ctx
from omjax.options.menu import Instance, MenuItem
from omjax.options.schema import Reason
from omjax.options.synthesis import Guard



def instances_for(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int) -> list[Instance]:
    return menu_mod.instantiate(lib.schema, targets(ctx, state, agent))


def menu_arrays(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int
                ) -> tuple[list[Instance], np.ndarray, np.ndarray]:
    """(instances, feats int8 [I, F], live bool [I, R]) of `agent`'s guardless menu: what the
    guard evaluators (`menu.hidden_mask`, `menu.hidden_mask_jax`) read."""
    insts = instances_for(lib, ctx, state, agent)
    agent_values = agent_feature_values(lib, ctx, state, agent)
    feats = np.empty((len(insts), len(lib.schema.read_set)), np.int8)
    live = np.empty((len(insts), len(Reason)), bool)
    for i, inst in enumerate(insts):
        feats[i] = read_codes(lib, ctx, state, agent, inst, agent_values)
        live[i] = live_memo(lib, ctx, state, agent, inst)
    return insts, feats, live


def menu(lib: MPLibrary, ctx: Ctx, state: SymbolicState, agent: int, guards: list[Guard],
         rng: np.random.Generator) -> tuple[list[MenuItem], list[Instance]]:
    """The lettered, guard-filtered, shuffled menu of `agent` and the instance list it indexes."""
    insts, feats, live = menu_arrays(lib, ctx, state, agent)
    return menu_mod.assemble_menu(lib.schema, guards, insts, feats, live, rng), insts


@dataclasses.dataclass(frozen=True)
class MenuBatch:
    """Guardless menus of many (state, agent) decisions as padded arrays, for the JAX evaluator.

    N decisions, I = the longest instance list; row n's first `count[n]` slots are its instances."""

    instances: list[list[Instance]]
    inst_opt: np.ndarray  # int32 [N, I]
    feats: np.ndarray  # int8 [N, I, F]
    live: np.ndarray  # bool [N, I, R]
    valid: np.ndarray  # bool [N, I]


def menu_batch(lib: MPLibrary, ctx: Ctx, decisions) -> MenuBatch:
    """`menu_arrays` of every (state, agent) in `decisions`, padded into one `MenuBatch`."""
    rows = [menu_arrays(lib, ctx, state, agent) for state, agent in decisions]
    n, i_max = len(rows), max((len(r[0]) for r in rows), default=0)
    inst_opt = np.zeros((n, i_max), np.int32)
    feats = np.zeros((n, i_max, len(lib.schema.read_set)), np.int8)
    live = np.zeros((n, i_max, len(Reason)), bool)
    valid = np.zeros((n, i_max), bool)
    for k, (insts, f, lv) in enumerate(rows):
        m = len(insts)
        inst_opt[k, :m] = [inst.opt for inst in insts]
        feats[k, :m], live[k, :m], valid[k, :m] = f, lv, True
    return MenuBatch([r[0] for r in rows], inst_opt, feats, live, valid)


def hidden_mask_batch_jax(table: "menu_mod.GuardTable", batch: MenuBatch):
    """bool [N, I]: `menu.hidden_mask_jax` of every row of `batch` in one jitted call (instance
    lists differ per decision, so the option index is batched too); padding slots are False."""
    hidden = _hidden_batch_fn()(table, batch.inst_opt, batch.feats, batch.live)
    return np.asarray(jax.device_get(hidden)) & batch.valid


@functools.cache
def _hidden_batch_fn():
    return jax.jit(jax.vmap(menu_mod.hidden_mask_jax, in_axes=(None, 0, 0, 0)))


def start_menu(lib: MPLibrary, env: MeltingPotEnv, regions: dict, seed: int, agent: int,
               guards: list[Guard]) -> list[MenuItem]:
    """The menu `agent` sees at the start of the episode seeded `seed` (letters: `episode_rng`)."""
    if not 0 <= agent < env.num_agents:
        raise ValueError(f"agent must be in 0..{env.num_agents - 1}, got {agent}")
    state = env.reset(seed)
    ctx = make_ctx(env, regions)
    items, _ = menu(lib, ctx, state, agent, guards, menu_mod.episode_rng(seed, agent))
    env.close()
    return items
