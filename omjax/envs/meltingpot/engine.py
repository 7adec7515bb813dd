"""Loading the real dm-meltingpot engine and describing its two substrates statically.

`import meltingpot` runs the package `__init__`, which imports `meltingpot.bot` and with it
TensorFlow (about 20 s on this machine) only to offer the saved bot policies, which omjax never
uses. `_meltingpot_package()` registers the installed package directory as the `meltingpot`
package without running that `__init__`, so the substrate configs, the Lua levels and the lab
builder load exactly as installed, in under a second. If `meltingpot` is already imported (by
someone who wants the bots), that module is used as is.

A `Substrate` is the static description the adapter needs: the config module, the ASCII map,
the primitive action table, episode length, the layers its avatars and items live on, and the
sprite ids of the per-player `LAYER` observation (see `sprite_ids`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import sys
import types

import numpy as np

# Action components of a Melting Pot avatar, in the order used for the packed action table.
COMPONENTS = ("move", "turn", "fireZap", "fireClean")

# Layer stack of the per-player `LAYER` observation: dmlab2d's base render order. Hit layers
# (beams) follow these seven channels.
RENDER_ORDER = ("logic", "alternateLogic", "background", "lowerPhysical", "upperPhysical",
                "overlay", "superOverlay")

# `LAYER` is rendered with orientation 'N' whatever the avatar faces: the avatar sits at
# (row FORWARD, col LEFT) of its window, rows run north to south, columns west to east.
LAYER_FORWARD = 9
LAYER_LEFT = 5


def _meltingpot_package() -> types.ModuleType:
    if "meltingpot" in sys.modules:
        return sys.modules["meltingpot"]
    spec = importlib.util.find_spec("meltingpot")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("dm-meltingpot is not installed; see FACTS.md / install.sh for the offline install")
    pkg = types.ModuleType("meltingpot")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__spec__ = spec
    pkg.__file__ = spec.origin
    sys.modules["meltingpot"] = pkg
    return pkg


def config_module(name: str) -> types.ModuleType:
    """The substrate config module `meltingpot.configs.substrates.<name>` (no TensorFlow import)."""
    _meltingpot_package()
    try:
        return importlib.import_module(f"meltingpot.configs.substrates.{name}")
    except ModuleNotFoundError as err:
        raise ValueError(f"Melting Pot has no substrate {name!r}") from err


@dataclasses.dataclass(frozen=True)
class Substrate:
    """Static facts about one Melting Pot substrate, read from its config module."""

    name: str
    """config module name under `meltingpot.configs.substrates`"""
    episode_length: int
    """steps per episode (the paper's horizon; the engine's own stochastic ending is later)"""
    action_names: tuple[str, ...]
    """primitive actions in the substrate's ACTION_SET order (letters A, B, ... in this order)"""
    action_table: np.ndarray
    """int32 [N, len(COMPONENTS)]: component values of each primitive action"""
    ascii_map: tuple[str, ...]
    """the substrate's ASCII map rows (static layout)"""
    avatar_layer: str
    """layer avatars live on (superOverlay in clean_up: they walk over river and dirt)"""
    apple_layer: str
    dirt_layer: str | None
    sprite_names: tuple[str, ...]
    """every sprite name of the level, sorted (this is how dmlab2d numbers them)"""

    @property
    def num_players(self) -> int:
        return len(config_module(self.name).get_config().default_player_roles)

    def sprite_id(self, name: str) -> int:
        """Id of sprite `name` (orientation N) in the `LAYER` observation.

        dmlab2d numbers the sorted sprite names with four ids each (one per orientation), from 1;
        0 is an empty cell. Checked against the engine by tests/envs/test_meltingpot.py."""
        return 4 * self.sprite_names.index(name) + 1

    def layer_channel(self, layer: str) -> int:
        return RENDER_ORDER.index(layer)


def _sprite_names(settings: dict) -> tuple[str, ...]:
    """All sprite names of a built level: state sprites, appearance and custom sprites, beams."""
    names = {"OutOfBounds", "OutOfView"}

    def visit(obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if key == "sprite" and isinstance(value, str):
                    names.add(value)
                elif key in ("spriteNames", "customSpriteNames"):
                    names.update(value)
                else:
                    visit(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                visit(value)

    visit(settings["simulation"])
    # Beam sprites are registered by the Lua Zapper / Cleaner components, not by the config.
    names.add("BeamZap")
    if _has_component(settings, "Cleaner"):
        names.add("BeamClean")
    return tuple(sorted(names))


def _has_component(settings: dict, component: str) -> bool:
    found = False

    def visit(obj):
        nonlocal found
        if isinstance(obj, dict):
            if obj.get("component") == component:
                found = True
            for value in obj.values():
                visit(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                visit(value)

    visit(settings["simulation"])
    return found


def _substrate(name: str, episode_length: int, avatar_layer: str, apple_layer: str,
               dirt_layer: str | None) -> Substrate:
    mod = config_module(name)
    actions = mod.ACTION_SET
    action_names = []
    lookup = {id(getattr(mod, n)): n for n in dir(mod) if n.isupper() and isinstance(getattr(mod, n), dict)}
    for a in actions:
        action_names.append(lookup[id(a)])
    table = np.array([[a.get(c, 0) for c in COMPONENTS] for a in actions], np.int32)
    cfg = mod.get_config()
    settings = mod.build(cfg.default_player_roles, cfg)
    rows = tuple(r for r in mod.ASCII_MAP.split("\n") if r)
    return Substrate(name=name, episode_length=episode_length, action_names=tuple(action_names),
                     action_table=table, ascii_map=rows, avatar_layer=avatar_layer,
                     apple_layer=apple_layer, dirt_layer=dirt_layer, sprite_names=_sprite_names(settings))


def clean_up() -> Substrate:
    """`clean_up`, 7 players, 150-step episodes (paper §6.1)."""
    return _substrate("clean_up", 150, avatar_layer="superOverlay", apple_layer="upperPhysical",
                      dirt_layer="upperPhysical")


def commons_harvest() -> Substrate:
    """`commons_harvest__open`, 7 players, 400-step episodes.

    The paper names `commons_harvest_no_thinning`, which Melting Pot 2.4.1 does not have; `__open`
    is the 2.4.1 substrate with the same dynamics the paper describes (apples regrow only near
    uneaten apples, so an emptied patch is lost for good) and no thinning mechanic."""
    return _substrate("commons_harvest__open", 400, avatar_layer="upperPhysical",
                      apple_layer="lowerPhysical", dirt_layer=None)


def build_lab(substrate: Substrate, seed: int):
    """A fresh `dmlab2d.Lab2d` of the substrate with debug observations, started with `seed`.

    The engine must be rebuilt for every episode: restarting a clean_up Lab2d aborts the process
    in its Lua DirtTracker (the reason Melting Pot's own ResetWrapper rebuilds on reset).
    """
    mod = config_module(substrate.name)
    from meltingpot.utils.substrates import builder  # noqa: PLC0415  (needs the package shim)

    # The flag is read inside get_config()/build(); setting it here keeps every other user of the
    # module on the default (non-debug) config only if they build before us, so restore it.
    previous = mod._ENABLE_DEBUG_OBSERVATIONS
    mod._ENABLE_DEBUG_OBSERVATIONS = True
    try:
        cfg = mod.get_config()
        settings = mod.build(cfg.default_player_roles, cfg)
    finally:
        mod._ENABLE_DEBUG_OBSERVATIONS = previous
    env = builder.builder(settings, env_seed=int(seed))
    lab = env._env._env  # ResetWrapper -> dmlab2d.Environment -> Lab2d
    lab.start(0, seed=int(seed))
    return lab
