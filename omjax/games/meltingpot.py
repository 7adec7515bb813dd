"""Melting Pot Cleanup and Commons Harvest as `Game`s of the rollout engine (`omjax.games.base`).

K episodes run concurrently, one real engine per worker process (`omjax.envs.meltingpot.workers.
EnvPool`); the game keeps every episode's `SymbolicState` on the host and drives the option loop
of `omjax.envs.meltingpot` one env step at a time:

* `options` (the method): an agent decides only when its option has terminated. Its menu is
  `omjax.options.meltingpot.menu` (instances per visible target, guard-filtered, letters from the
  engine's per-episode, per-agent RNG); the chosen instance starts with `mp.start`, every agent
  emits `mp.act`'s primitive, the K engines step together, and `mp.advance` ends options.
* `native` (Ablations A and C): every agent decides at every step among the substrate's
  primitive letters (A-I in Cleanup, A-H in Harvest, `omjax.envs.meltingpot.text.
  primitive_actions`), applied for one step.
* `compound_json` (Ablation D): decisions as for `options`, but the prompt lists the option
  vocabulary instead of a menu and the free reply `{"action": ..., "args": {"target": [x, y]}}`
  names an instance of the guardless instantiation; invalid and no-op emissions are counted.

The team reward of a step is the sum of all agents' rewards (+1 per apple eaten); in Cleanup,
`env.reward_shaping` > 0 adds that weight times `CLEAN_BONUS` per dirt cell cleaned (short CPU
episodes end before apples regrow; `omjax eval` sets it to 0). Each game also
keeps the behavioural probes of every episode (`probes(k)`: apples eaten and cleaning per agent,
FIRE_CLEAN actions, visit counts, Harvest patches alive per step, call ratio); `extras()` reports
`eaten` and `cleaned` per agent, and in Harvest `patches_alive`. A worker that crashes fails the
rollout with a `RolloutWorkerError` naming the rollout and step.

`env.layout` selects the option library: the substrate name (`clean_up`, `commons_harvest__open`)
means the game's default library (`lib_a`); a library variant name (`lib_a`, `lib_b`) picks that
one. `env.guards` works as for Overcooked (empty: the shipped guard file of the library, `none`:
the unfiltered menu).
"""

from __future__ import annotations

import numpy as np

from omjax.envs.meltingpot import make
from omjax.envs.meltingpot.adapter import SymbolicState
from omjax.envs.meltingpot.probes import Probes, probes_decisions, probes_init, probes_step
from omjax.envs.meltingpot.workers import EnvPool, RolloutWorkerError, WorkerCrash
from omjax.games.base import Game, NativeActions
from omjax.interfaces.compound_json import EmissionLedger, render_vocabulary
from omjax.interfaces.native import primitive_actions
from omjax.options import cleanup, harvest
from omjax.options import meltingpot as mp
from omjax.options.menu import MenuItem, check_menu_format, items_from_ranks, render_menu
from omjax.options.synthesis import read_guards
from omjax.prompts import meltingpot as prompts
from omjax.prompts.memory import Memory

SUBSTRATES = {"cleanup": "clean_up", "harvest": "commons_harvest__open"}
"""Config game name -> the Melting Pot substrate it plays (also accepted as `env.layout`)."""

APPLE_REWARD = 1.0
"""Reward of one apple eaten in both substrates (the unit of the team return)."""

CLEAN_BONUS = 1.0
"""Cleanup progress bonus per dirt cell cleaned, scaled by `env.reward_shaping` (0 in the paper)."""


def engine_seed(seed: int) -> int:
    """The Lab2d seed of an episode seed: the engine takes a signed 32-bit seed, the rollout
    engine's episode seeds are unsigned 32-bit."""
    return int(seed) & 0x7FFF_FFFF


LIBRARIES = {"cleanup": cleanup.LIBRARY, "harvest": harvest.LIBRARY}
"""Game -> its option libraries."""


def resolve_library(game: str, layout: str) -> str:
    """The option-library variant `env.layout` names (see the module docstring)."""
    variants = LIBRARIES[game].VARIANTS
    if layout in variants:
        return layout
    if layout == SUBSTRATES[game]:
        return variants[0]
    raise ValueError(f"game {game!r} has no layout {layout!r}: expected the substrate name "
                     f"{SUBSTRATES[game]!r} (default library {variants[0]}) or a library variant "
                     f"({', '.join(variants)})")


class MeltingPotGame(Game):
    """K concurrent episodes of one substrate: states, probes, team rewards; interface-neutral."""

    interface = "options"

    def __init__(self, game: str, horizon: int, reward_shaping: float = 0.0, advice: bool = False):
        if game not in SUBSTRATES:
            raise ValueError(f"unknown Melting Pot game {game!r}; known: {', '.join(SUBSTRATES)}")
        self.game = game
        self.horizon = int(horizon)
        self.reward_shaping = float(reward_shaping)
        # Layout and action names only; the episodes run in the workers.
        self.static = make(game, self.horizon)
        self.substrate = self.static.substrate
        self.layout = self.static.layout
        self.n_agents = self.static.num_agents
        self.delivery_reward = APPLE_REWARD
        self.action_names = tuple(self.substrate.action_names)
        fire = [i for i, n in enumerate(self.action_names) if n == "FIRE_CLEAN"]
        self._fire_clean = fire[0] if fire else None
        self._pool: EnvPool | None = None
        self.seeds: list[int] = []
        self.states: list[SymbolicState] = []
        self._probes: list[Probes] = []
        self._apples = np.zeros((0, self.n_agents), np.int64)
        self._system = prompts.system_message(game, self.n_agents, APPLE_REWARD, self.interface, advice)

    # ------------------------------------------------------------------ episodes
    def reset(self, seeds: list[int]) -> None:
        seeds = [int(s) for s in seeds]
        if self._pool is None or self._pool.num_envs != len(seeds):
            self.close()
            self._pool = EnvPool(self.game, len(seeds), episode_length=self.horizon)
        self.seeds = seeds
        self.states = self._checked(self._pool.reset([engine_seed(s) for s in seeds]))
        self._probes = [probes_init(s, self.layout.shape) for s in self.states]
        self._apples = np.zeros((len(seeds), self.n_agents), np.int64)

    @property
    def n_episodes(self) -> int:
        return len(self.states)

    def _checked(self, results: list) -> list[SymbolicState]:
        for slot, r in enumerate(results):
            if isinstance(r, WorkerCrash):
                raise RolloutWorkerError(f"{self.game}: the engine worker of rollout {slot} crashed after "
                                         f"{r.step} env steps: {r.summary}")
        return results

    def _step_envs(self, actions: np.ndarray, deciding: np.ndarray) -> np.ndarray:
        """Step all K engines with `actions` int [K, A]; probes; returns the team reward [K]."""
        if self._pool is None or not self.states:
            raise RuntimeError("call reset(seeds) before step()")
        if any(s.done for s in self.states):
            raise RuntimeError(f"the episodes are over after {self.states[0].step} steps (horizon {self.horizon})")
        actions = np.asarray(actions, np.int64)
        self.states = self._checked(self._pool.step(actions))
        for k, state in enumerate(self.states):
            p = probes_decisions(self._probes[k], deciding[k])
            self._probes[k] = probes_step(p, actions[k], state, self._fire_clean)
            self._apples[k] += state.ate
        reward = np.array([float(s.reward.sum()) for s in self.states])  # the team reward, shared
        if self.reward_shaping:
            reward += self.reward_shaping * CLEAN_BONUS * np.array([float(s.cleaned.sum()) for s in self.states])
        return reward

    def close(self) -> None:
        """Stop the worker processes (they are daemons, so they also end with this process)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: the daemon workers end anyway)
            pass

    # ------------------------------------------------------------------ prompts
    def system_message(self) -> str:
        return self._system

    def state_labels(self) -> tuple[str, ...]:
        return prompts.STATES[self.game]

    def state_label(self, k: int, agent: int) -> str:
        return prompts.state_label(self.game, self.states[k], agent)

    menu_format = "letter_first"  # the option interface's `env.menu_format`

    def _menu_text(self, k: int, agent: int, menu: list[MenuItem]) -> str:
        return render_menu(menu, self.menu_format)

    def user_message(self, k: int, agent: int, menu: list[MenuItem], memory: Memory) -> str:
        return prompts.user_message(self.substrate, self.layout, self.states[k], agent,
                                    self._menu_text(k, agent, menu), memory, self.horizon, self.interface)

    # ------------------------------------------------------------------ what the evaluation reads
    def probes(self, k: int) -> Probes:
        """Behavioural probes of episode k so far."""
        return self._probes[k]

    def positions(self) -> np.ndarray:
        """int [K, A, 2] (x, y) of every agent now."""
        return np.stack([s.pos for s in self.states])

    def agent_returns(self) -> np.ndarray:
        """float [K, A] apples each agent has eaten so far (the per-agent return in task units)."""
        return self._apples.astype(np.float64)

    def walls(self) -> np.ndarray:
        """bool [H, W] cells no avatar can stand on."""
        return ~self.layout.walkable

    def extras(self) -> dict[str, np.ndarray]:
        """`eaten`, `cleaned` int [K, A] so far; Harvest adds `patches_alive` int [K] now (what
        Fig. 2 plots)."""
        out = {"eaten": np.stack([p.apples for p in self._probes]),
               "cleaned": np.stack([p.cleaned for p in self._probes])}
        if self.game == "harvest":
            out["patches_alive"] = np.array([int((s.patch_apples > 0).sum()) for s in self.states], np.int32)
        return out


class MeltingPotOptionsGame(MeltingPotGame):
    """The option-menu interface: call-and-return options, asynchronous decisions."""

    def __init__(self, game: str, horizon: int, variant: str, guards_path: str, reward_shaping: float = 0.0,
                 advice: bool = False, menu_format: str = "letter_first"):
        super().__init__(game, horizon, reward_shaping, advice)
        check_menu_format(menu_format)
        self.menu_format = menu_format
        libraries = LIBRARIES[game]
        self.lib = libraries.library(variant)
        self.ctx = mp.make_ctx(self.static, libraries.regions(self.static))
        names = set(self.lib.schema.option_names)
        # A guard file may hold the guards of every library of the game (its union schema).
        self.guards = [g for g in read_guards(guards_path, libraries.SCHEMA) if g.opt in names] if guards_path else []
        self._wait = {o for o, kind in enumerate(self.lib.options) if kind.kind == "wait"}
        self.running: list[list[mp.Execution | None]] = []
        self._insts: dict[tuple[int, int], list] = {}

    def reset(self, seeds: list[int]) -> None:
        super().reset(seeds)
        self.running = [[None] * self.n_agents for _ in seeds]
        self._insts = {}

    def needs_decision(self) -> np.ndarray:
        return np.array([[ex is None for ex in row] for row in self.running], bool).reshape(-1, self.n_agents)

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        items, insts = mp.menu(self.lib, self.ctx, self.states[k], agent, self.guards, rng)
        self._insts[(k, agent)] = insts
        return items

    def fallback(self, k: int, agent: int, menu: list[MenuItem]) -> int:
        insts = self._insts[(k, agent)]
        for pos, item in enumerate(menu):
            if insts[item.index].opt in self._wait:
                return pos
        raise ValueError(f"the menu of agent {agent} has no wait entry to fall back on")

    def step(self, choices: np.ndarray) -> np.ndarray:
        choices = np.asarray(choices)
        deciding = self.needs_decision()
        lib, ctx = self.lib, self.ctx
        for k, a in np.argwhere(deciding):
            k, a = int(k), int(a)
            insts = self._insts.pop((k, a), None)
            if insts is None:
                raise RuntimeError(f"rollout {k}, agent {a} must decide: call menu() before step()")
            self.running[k][a] = mp.start(lib, ctx, self.states[k], a, insts[int(choices[k, a])])
        actions = np.array([[mp.act(lib, ctx, ex, s) for ex in row] for row, s in zip(self.running, self.states)],
                           np.int64)
        reward = self._step_envs(actions, deciding)
        for k, state in enumerate(self.states):
            for a, ex in enumerate(self.running[k]):
                ex, outcome, _ = mp.advance(lib, ctx, ex, int(actions[k, a]), state)
                self.running[k][a] = None if outcome is not None else ex
                if outcome is not None:
                    self._ended(k, a, outcome)
        return reward

    def _ended(self, k: int, agent: int, outcome: int) -> None:
        """Hook: agent's option in rollout k ended with `outcome` (SUCCESS, EFFECT_FAIL, ...)."""


class MeltingPotCompoundGame(EmissionLedger, MeltingPotOptionsGame):
    """Compound-JSON (Ablation D): the option vocabulary instead of a menu, free replies.

    The reply is parsed (`omjax.interfaces.compound_json.parse_emission`) into an instance of the
    agent's guardless instantiation -- one instance per target of each option's class that the
    agent can see, exactly what its menu is built from before guards -- and run by the same
    executor. An invalid emission falls back to `wait`; invalid and no-op emissions (the option
    ended without its effect) are counted per agent, as for Overcooked.
    """

    interface = "compound_json"

    def __init__(self, game: str, horizon: int, variant: str, reward_shaping: float = 0.0, advice: bool = False):
        super().__init__(game, horizon, variant, guards_path="", reward_shaping=reward_shaping, advice=advice)
        self.reset_ledger(0, self.n_agents)

    def reset(self, seeds: list[int]) -> None:
        super().reset(seeds)
        self.reset_ledger(len(seeds), self.n_agents)

    def menu(self, k: int, agent: int, rng: np.random.Generator) -> list[MenuItem]:
        """The guardless instances in construction order (never shown; replies resolve into it)."""
        insts = mp.instances_for(self.lib, self.ctx, self.states[k], agent)
        self._insts[(k, agent)] = insts
        return items_from_ranks(self.lib.schema, insts, np.arange(len(insts)))

    def _menu_text(self, k: int, agent: int, menu: list[MenuItem]) -> str:
        return render_vocabulary(self.lib.schema, self._insts[(k, agent)])

    def parse_choice(self, k: int, agent: int, menu: list[MenuItem], reply: str) -> int | None:
        """Menu position of the instance the reply names, or None (invalid: counted, falls back)."""
        return self.parse_reply(k, agent, reply, self.lib.schema, self._insts[(k, agent)])

    def _ended(self, k: int, agent: int, outcome: int) -> None:
        self.executed(k, agent, outcome)

    def extras(self) -> dict[str, np.ndarray]:
        return {**super().extras(), "invalid_emissions": self.invalid_counts(), "noop_emissions": self.noop_counts()}


class MeltingPotNativeGame(NativeActions, MeltingPotGame):
    """Primitive letters (A-I in Cleanup, A-H in Harvest), one LLM decision per agent per env step."""

    def __init__(self, game: str, horizon: int, reward_shaping: float = 0.0, advice: bool = False):
        super().__init__(game, horizon, reward_shaping, advice)
        self.use_actions(primitive_actions(self.substrate), idle="noop")

    def step(self, choices: np.ndarray) -> np.ndarray:
        return self._step_envs(np.asarray(choices), self.needs_decision())
