"""Adapters `CleanUp()` and `CommonsHarvest()`: the real engine, stepped for all players at once,
with an exact symbolic state after every step.

Where the symbolic state comes from (all read from the engine, nothing simulated):

* avatars: `{i}.POSITION`, `{i}.ORIENTATION` (0 N, 1 E, 2 S, 3 W) of the debug observations;
  `alive` is False while an avatar is zapped out (its own `{i}.LAYER` cell then shows no `Self`).
* apples and dirt: `GLOBAL.TEXT`, the engine's ASCII render of the grid's topmost sprite per
  cell ('A' apple or avatar, 'D' dirt, 'B' a beam). Cells hidden under an avatar or a beam are
  read from the per-player `{i}.LAYER` observation (one sprite-id channel per layer) of an alive
  avatar whose window covers them: a beam lies in front of its shooter, inside the shooter's
  window, and an avatar's own cell is in its own window. Only if no alive avatar covers an
  occluded cell (a shooter zapped out on the same step) is the previous value kept.
* rewards: `{i}.REWARD`; who ate: `{i}.PLAYER_ATE_APPLE` (clean_up) or the reward (Harvest,
  whose only reward is +1 per apple); who cleaned: `{i}.PLAYER_CLEANED` (dirt cells cleaned).

Agent order. The engine assigns avatars to spawn points through Lua table iteration, whose order
is reproducible only once LuaJIT's PRNG is pinned (`engine.pin_luajit_seed`). The adapter numbers
agents by their spawn cell in reading order (row, then column): agent 0 is the avatar that
spawned northernmost-westernmost, whatever order the engine's players come in. With the pinned
PRNG an episode is a deterministic function of the seed, the actions and the memory addresses the
engine's allocations get (`omjax.envs.meltingpot.isolated` fixes those for the burn-in).

Each `reset(seed)` builds a fresh engine (about 1.5 s): restarting a clean_up engine in place
aborts the process inside its Lua code.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from omjax.envs.meltingpot import engine
from omjax.envs.meltingpot.engine import COMPONENTS, LAYER_FORWARD, LAYER_LEFT, Substrate
from omjax.envs.meltingpot.layout import Layout, parse_layout

ORIENTATIONS = ("North", "East", "South", "West")
# Unit step (dx, dy) of each orientation; y grows southwards.
HEADING = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], np.int32)

BEAM_CHAR = ord("B")  # BeamClean / BeamZap in GLOBAL.TEXT
APPLE_CHAR = ord("A")  # Apple, and Avatar<i>: told apart by the avatars' positions
DIRT_CHAR = ord("D")


@dataclasses.dataclass(frozen=True)
class SymbolicState:
    """Everything the option layer and the probes read, after `step` env steps. A agents."""

    step: int
    pos: np.ndarray  # int32 [A, 2] (x, y)
    ori: np.ndarray  # int32 [A] index into ORIENTATIONS
    alive: np.ndarray  # bool [A] False while zapped out
    apples: np.ndarray  # bool [H, W]
    dirt: np.ndarray  # bool [H, W] (all False in Harvest)
    reward: np.ndarray  # float32 [A] reward of the last step
    ate: np.ndarray  # int32 [A] apples eaten on the last step
    cleaned: np.ndarray  # int32 [A] dirt cells cleaned on the last step
    patch_apples: np.ndarray  # int32 [P] apples on each Harvest patch (P = 0 in clean_up)
    done: bool

    @property
    def num_agents(self) -> int:
        return len(self.ori)


def _text_grid(text: bytes, shape: tuple[int, int]) -> np.ndarray:
    """uint8 [H, W] character codes of GLOBAL.TEXT (rows end with a newline)."""
    h, w = shape
    raw = np.frombuffer(text, np.uint8)
    if raw.size != h * (w + 1):
        raise RuntimeError(f"GLOBAL.TEXT has {raw.size} bytes, the {h} x {w} substrate map needs {h * (w + 1)}")
    return raw.reshape(h, w + 1)[:, :w]


class MeltingPotEnv:
    """One Melting Pot episode at a time; `reset(seed)` then `step(actions)` until `done`.

    `actions` is int [A]: indices into `substrate.action_names` (letters A, B, ... in order).
    """

    def __init__(self, substrate: Substrate, episode_length: int | None = None):
        self.substrate = substrate
        self.layout: Layout = parse_layout(substrate)
        self.episode_length = substrate.episode_length if episode_length is None else int(episode_length)
        if self.episode_length < 1:
            raise ValueError(f"episode_length must be >= 1, got {self.episode_length}")
        self.num_agents = substrate.num_players
        self._lab = None
        self._state: SymbolicState | None = None
        self._apple_ch = substrate.layer_channel(substrate.apple_layer)
        self._dirt_ch = None if substrate.dirt_layer is None else substrate.layer_channel(substrate.dirt_layer)
        self._avatar_ch = substrate.layer_channel(substrate.avatar_layer)
        self._apple_id = substrate.sprite_id("Apple")
        self._dirt_id = substrate.sprite_id("Dirt") if substrate.dirt_layer is not None else -1
        self._self_id = substrate.sprite_id("Self")
        self._has_ate_obs = substrate.dirt_layer is not None  # only clean_up reports PLAYER_ATE_APPLE

    # ------------------------------------------------------------------ engine IO
    def _obs(self, name: str) -> np.ndarray:
        return np.asarray(self._lab.observation(name))

    def _player_obs(self, suffix: str) -> list[np.ndarray]:
        names = self._obs_names.get(suffix)
        if names is None:
            names = self._obs_names[suffix] = [f"{i + 1}.{suffix}" for i in self._lua]
        observation = self._lab.observation
        return [observation(name) for name in names]

    @property
    def state(self) -> SymbolicState:
        if self._state is None:
            raise RuntimeError("call reset(seed) before reading the state")
        return self._state

    def reset(self, seed: int) -> SymbolicState:
        self._lab = None  # the Lab2d has no close(); dropping it frees the Lua state
        self._lab = engine.build_lab(self.substrate, seed)
        self.seed = int(seed)
        n = self.num_agents
        spawn = [tuple(self._obs(f"{i + 1}.POSITION").tolist()) for i in range(n)]
        # Agent a is the avatar with the a-th spawn cell in reading order (see module doc).
        self._lua = sorted(range(n), key=lambda i: (spawn[i][1], spawn[i][0]))
        self._obs_names: dict[str, list[str]] = {}
        names = list(self._lab.action_discrete_names())
        self._act_index = np.full((n, len(COMPONENTS)), -1, np.int64)
        for a, lua in enumerate(self._lua):
            for c, comp in enumerate(COMPONENTS):
                key = f"{lua + 1}.{comp}"
                if key in names:
                    self._act_index[a, c] = names.index(key)
        self._act_used = self._act_index >= 0
        self._act_buffer = np.zeros(len(names), np.int32)
        self._step = 0
        self._state = self._read_state(previous=None)
        return self._state

    def step(self, actions) -> SymbolicState:
        if self._state is None:
            raise RuntimeError("call reset(seed) before step()")
        if self._state.done:
            raise RuntimeError(f"episode is over after {self._step} steps; call reset(seed)")
        actions = np.asarray(actions)
        n_act = len(self.substrate.action_names)
        if actions.shape != (self.num_agents,) or not np.issubdtype(actions.dtype, np.integer):
            raise ValueError(f"actions must be int [{self.num_agents}], got {actions.dtype} {actions.shape}")
        if actions.min() < 0 or actions.max() >= n_act:
            raise ValueError(f"actions must lie in 0..{n_act - 1} ({', '.join(self.substrate.action_names)}), "
                             f"got {actions.tolist()}")
        comp = self.substrate.action_table[actions]  # [A, C]
        self._act_buffer[self._act_index[self._act_used]] = comp[self._act_used]
        self._lab.act_discrete(self._act_buffer)
        self._lab.advance()
        self._step += 1
        self._state = self._read_state(previous=self._state)
        return self._state

    def close(self) -> None:
        self._lab = None
        self._state = None

    # ------------------------------------------------------------------ symbolic state
    def _read_state(self, previous: SymbolicState | None) -> SymbolicState:
        lay = self.layout
        pos = np.array(self._player_obs("POSITION"), np.int32).reshape(-1, 2)
        ori = np.array(self._player_obs("ORIENTATION"), np.int32).reshape(-1)
        layers = np.stack(self._player_obs("LAYER"))  # [A, 11, 11, L]
        own = layers[:, LAYER_FORWARD, LAYER_LEFT, self._avatar_ch]
        alive = (own >= self._self_id) & (own < self._self_id + 4)
        reward = np.array(self._player_obs("REWARD"), np.float32).reshape(-1)
        if self._has_ate_obs:
            ate = np.rint(np.array(self._player_obs("PLAYER_ATE_APPLE"), np.float64)).astype(np.int32).reshape(-1)
            cleaned = np.rint(np.array(self._player_obs("PLAYER_CLEANED"), np.float64)).astype(np.int32).reshape(-1)
        else:
            ate = np.rint(reward).astype(np.int32)
            cleaned = np.zeros(self.num_agents, np.int32)

        grid = _text_grid(self._lab.observation("GLOBAL.TEXT"), lay.shape)
        occluded = grid == BEAM_CHAR
        live_pos = pos[alive]
        occluded[live_pos[:, 1], live_pos[:, 0]] = True
        apples = (grid == APPLE_CHAR) & ~occluded
        dirt = (grid == DIRT_CHAR) & ~occluded
        ys, xs = np.nonzero(occluded)
        if len(ys):
            apple, dirt_here, seen = self._peek_all(xs, ys, pos, alive, layers)
            if previous is not None:  # nobody alive sees the cell: keep what it was
                apple = np.where(seen, apple, previous.apples[ys, xs])
                dirt_here = np.where(seen, dirt_here, previous.dirt[ys, xs])
            apples[ys, xs] = apple
            dirt[ys, xs] = dirt_here

        if lay.num_patches:
            patch_apples = np.bincount(lay.patch_id[apples & (lay.patch_id >= 0)],
                                       minlength=lay.num_patches).astype(np.int32)
        else:
            patch_apples = np.zeros(0, np.int32)
        return SymbolicState(step=self._step, pos=pos, ori=ori, alive=alive, apples=apples, dirt=dirt,
                             reward=reward, ate=ate, cleaned=cleaned, patch_apples=patch_apples,
                             done=self._step >= self.episode_length)

    def _peek_all(self, xs: np.ndarray, ys: np.ndarray, pos, alive, layers):
        """(apple, dirt, seen) bool [N] at the cells (xs, ys), each from the LAYER window of the
        first alive avatar (in agent order) covering it; seen False where none does."""
        who = np.nonzero(alive)[0]
        if not len(who):
            false = np.zeros(len(xs), bool)
            return false, false, false
        r = ys[:, None] - (pos[who, 1] - LAYER_FORWARD)[None, :]  # [N, alive]
        c = xs[:, None] - (pos[who, 0] - LAYER_LEFT)[None, :]
        cover = (r >= 0) & (r < layers.shape[1]) & (c >= 0) & (c < layers.shape[2])
        seen = cover.any(axis=1)
        k = cover.argmax(axis=1)
        n = np.arange(len(xs))
        cell = layers[who[k], r[n, k].clip(0, layers.shape[1] - 1), c[n, k].clip(0, layers.shape[2] - 1)]  # [N, L]
        apple = (cell[:, self._apple_ch] == self._apple_id) & seen
        if self._dirt_ch is None:
            dirt = np.zeros(len(xs), bool)
        else:
            dirt = (cell[:, self._dirt_ch] == self._dirt_id) & seen
        return apple, dirt, seen


def CleanUp(episode_length: int | None = None) -> MeltingPotEnv:  # noqa: N802  (the issue's name)
    """Melting Pot `clean_up`, 7 agents, 150-step episodes."""
    return MeltingPotEnv(engine.clean_up(), episode_length)


def CommonsHarvest(episode_length: int | None = None) -> MeltingPotEnv:  # noqa: N802
    """Melting Pot `commons_harvest__open`, 7 agents, 400-step episodes (see engine.commons_harvest)."""
    return MeltingPotEnv(engine.commons_harvest(), episode_length)


GAMES = {"cleanup": CleanUp, "harvest": CommonsHarvest}


def make(game: str, episode_length: int | None = None) -> MeltingPotEnv:
    if game not in GAMES:
        raise ValueError(f"unknown Melting Pot game {game!r}; known: {', '.join(GAMES)}")
    return GAMES[game](episode_length)
