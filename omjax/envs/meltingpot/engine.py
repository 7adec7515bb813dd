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

import ctypes
import dataclasses
import importlib
import os
import platform
import struct
import sys
import types
import warnings

import numpy as np

from omjax.envs.packages import bare_package

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
    return bare_package("meltingpot", "see FACTS.md / install.sh for the offline dm-meltingpot install")


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


# ---------------------------------------------------------------------- reproducibility
# dmlab2d embeds LuaJIT 2.1, built with its default LUAJIT_SECURITY_PRNG / _STRHASH: every new Lua
# state seeds a PRNG from the OS entropy source (`lj_prng_seed_secure`, the getrandom syscall),
# and that PRNG seeds the string hash and the allocator's address probes. Lua's `pairs` visits
# string- and object-keyed tables in hash order, and Melting Pot's Lua iterates such tables to
# assign spawn points, order object updates (apple regrowth draws) and pick respawn cells. So the
# same env seed gave a different episode on every build (tests/data and `omjax guards` saw it:
# Commons Harvest's spawn cells and regrowth differed at step 0). The episode RNG itself is
# seeded from the env seed; only this entropy is outside it.
#
# `pin_luajit_seed()` replaces, in this process's copy of the loaded extension, the body of
# `lj_prng_seed_secure` with a stub that writes a fixed PRNG state and returns success. With it,
# an episode is a function of (env seed, actions) and of the memory addresses the engine's
# allocations get: the same seed spawned Commons Harvest's avatars on 2-4 different cell sets
# depending only on the size of the process's environment. Bit-identical runs therefore also need
# every episode to start from the same address space (`omjax.envs.meltingpot.isolated`). Only
# x86-64 Linux is patched; the symbol is looked up in the extension's ELF symbol table, so another
# dmlab2d build is handled or, if the symbol is missing, left alone with a warning. Set
# OMJAX_MELTINGPOT_ENTROPY=1 to keep LuaJIT's OS-seeded behaviour.
_PRNG_SYMBOL = b"lj_prng_seed_secure"
_PRNG_STATE = (0x9E3779B97F4A7C15,) * 4  # one value in all four words: its first address probe lands in free low memory
_pinned: bool | None = None


def _prng_stub() -> bytes:
    """x86-64: `int lj_prng_seed_secure(PRNGState *rs)` { rs->u[0..3] = _PRNG_STATE; return 1; }."""
    code = b""
    for i, value in enumerate(_PRNG_STATE):
        code += b"\x48\xb8" + struct.pack("<Q", value)  # mov rax, imm64
        code += b"\x48\x89\x07" if i == 0 else b"\x48\x89\x47" + bytes([8 * i])  # mov [rdi + 8i], rax
    return code + b"\xb8\x01\x00\x00\x00\xc3"  # mov eax, 1; ret


def _elf_symbol(path: str, name: bytes) -> tuple[int, int, int] | None:
    """(st_value, st_size, vaddr of the file-offset-0 PT_LOAD) of symbol `name` in an ELF64 file."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 0x20)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 0x36)
    base_vaddr = None
    for i in range(e_phnum):
        p_type, _, p_offset, p_vaddr = struct.unpack_from("<IIQQ", data, e_phoff + i * e_phentsize)
        if p_type == 1 and p_offset == 0:  # PT_LOAD
            base_vaddr = p_vaddr
            break
    if base_vaddr is None:
        return None
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    for sh_type, sh_link, sh_offset, sh_size, sh_entsize in (
            (sec[1], sec[6], sec[4], sec[5], sec[9]) for sec in sections):
        if sh_type != 2 or not sh_entsize:  # SHT_SYMTAB
            continue
        str_off = sections[sh_link][4]
        for k in range(sh_size // sh_entsize):
            st_name, _, _, _, st_value, st_size = struct.unpack_from("<IBBHQQ", data, sh_offset + k * sh_entsize)
            end = data.index(b"\0", str_off + st_name)
            if data[str_off + st_name:end] == name and st_value:
                return st_value, st_size, base_vaddr
    return None


def pin_luajit_seed() -> bool:
    """Make every Lua state of the loaded dmlab2d extension start from one fixed PRNG state (see
    above). Idempotent; True if pinned."""
    global _pinned
    if _pinned is not None:
        return _pinned
    _pinned = False
    if os.environ.get("OMJAX_MELTINGPOT_ENTROPY") == "1":
        return False
    if sys.platform != "linux" or platform.machine() != "x86_64":
        warnings.warn("Melting Pot episodes are not reproducible here: LuaJIT's PRNG seed is pinned only "
                      "on x86-64 Linux", stacklevel=2)
        return False
    import dmlab2d.dmlab2d_pybind as pybind  # noqa: PLC0415

    path = os.path.realpath(pybind.__file__)
    found = _elf_symbol(path, _PRNG_SYMBOL)
    code = _prng_stub()
    if found is None or found[1] < len(code):
        warnings.warn(f"Melting Pot episodes are not reproducible: no {_PRNG_SYMBOL.decode()} of "
                      f">= {len(code)} bytes in {path}", stacklevel=2)
        return False
    value, _, base_vaddr = found
    load = None
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and int(parts[2], 16) == 0 and os.path.realpath(parts[5]) == path:
                load = int(parts[0].split("-")[0], 16)
                break
    if load is None:
        warnings.warn(f"Melting Pot episodes are not reproducible: {path} is not mapped", stacklevel=2)
        return False
    addr = load + value - base_vaddr
    if ctypes.string_at(addr, len(code)) != code:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        page = os.sysconf("SC_PAGE_SIZE")
        start = addr & ~(page - 1)
        length = (addr + len(code) - start + page - 1) // page * page
        if libc.mprotect(start, length, 7) != 0:  # PROT_READ | PROT_WRITE | PROT_EXEC
            warnings.warn(f"Melting Pot episodes are not reproducible: mprotect failed "
                          f"(errno {ctypes.get_errno()})", stacklevel=2)
            return False
        ctypes.memmove(addr, code, len(code))
        libc.mprotect(start, length, 5)  # PROT_READ | PROT_EXEC
    _pinned = True
    return True


def build_lab(substrate: Substrate, seed: int):
    """A fresh `dmlab2d.Lab2d` of the substrate with debug observations, started with `seed`.

    The engine must be rebuilt for every episode: restarting a clean_up Lab2d aborts the process
    in its Lua DirtTracker (the reason Melting Pot's own ResetWrapper rebuilds on reset).
    """
    mod = config_module(substrate.name)
    from meltingpot.utils.substrates import builder  # noqa: PLC0415  (needs the package shim)

    pin_luajit_seed()

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
