"""The one game registry: canonical names and aliases, libraries, guard files, `make_game`."""

import dataclasses
import os

import jax
import pytest

from omjax.config import EnvConfig
from omjax.games import Game, canonical_game, cli, guard_path, library, make_game
from omjax.games.registry import ALIASES, GAMES, GameLibrary, resolve_variant
from omjax.prompts.interface import INTERFACES


def test_every_name_and_alias_resolves_to_one_canonical_game():
    assert GAMES == ("overcooked", "cleanup", "harvest")
    assert {name: canonical_game(name) for name in ALIASES} == {
        "clean_up": "cleanup", "commons_harvest": "harvest", "commons_harvest__open": "harvest",
        "overcooked_ai": "overcooked"}
    assert [canonical_game(g) for g in GAMES] == list(GAMES)
    with pytest.raises(ValueError, match="unknown game 'chess'.*overcooked, cleanup, harvest.*clean_up"):
        canonical_game("chess")


def test_libraries_variants_and_guard_files():
    for game in GAMES:
        lib = library(game)
        assert isinstance(lib, GameLibrary)
        assert all(os.path.isfile(guard_path(game, v)) for v in lib.VARIANTS[:1])
    assert library("clean_up") is library("cleanup")
    lib = library("overcooked")
    assert resolve_variant(lib, "overcooked", None) == "asymmetric_advantages"
    with pytest.raises(ValueError, match="no layout/variant 'moon'"):
        resolve_variant(lib, "overcooked", "moon")
    assert guard_path("overcooked", "forced_coordination").endswith("guards/overcooked_forced_coordination.jsonl")
    assert guard_path("commons_harvest__open", "lib_a") == guard_path("harvest", "lib_a")


def test_make_game_builds_every_interface_and_names_a_bad_one():
    env = EnvConfig(game="overcooked", layout="forced_coordination", horizon=4, n_agents=2)
    for interface in INTERFACES:
        game = make_game(env, interface)
        assert isinstance(game, Game) and game.interface == interface and game.game == "overcooked"
    with pytest.raises(ValueError, match="no action interface 'telepathy'"):
        make_game(env, "telepathy")
    with pytest.raises(ValueError, match="env.n_agents: must be 2: overcooked layout 'forced_coordination' has 2 agents, got 3"):
        make_game(EnvConfig(game="overcooked", layout="forced_coordination", n_agents=3), "native")


def test_the_option_commands_accept_aliases(capsys, monkeypatch, request, tmp_path):
    # The CLI turns on JAX's persistent compilation cache: keep it in tmp, and put it back after.
    monkeypatch.setenv("OMJAX_CACHE", str(tmp_path / "cache"))
    saved = {n: getattr(jax.config, n) for n in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")}
    request.addfinalizer(lambda: [jax.config.update(n, v) for n, v in saved.items()])
    assert cli.main(["menu", "--game", "overcooked_ai", "--layout", "forced_coordination", "--agent", "1"]) == 0
    assert ") " in capsys.readouterr().out
    assert cli.main(["menu", "--game", "chess"]) == 2
    assert "unknown game 'chess'" in capsys.readouterr().err


@pytest.mark.parametrize("game", ["cleanup", "harvest"])
def test_hand_selected_guards_are_a_smaller_set_that_hides_no_logged_success(game):
    """`env.guards=hand`: per variant a readable guard file, fewer guards than synthesis adopted,
    none hiding a success in the shipped burn-in (the synthesis certificate, on the hand set)."""
    from omjax.options.records import load_npz
    from omjax.options.synthesis import certificate_violations, read_guards

    lib = library(game)
    data = os.path.join(os.path.dirname(__file__), "..", "data", "meltingpot")
    for variant in lib.VARIANTS:
        hand = read_guards(guard_path(game, variant, hand=True), lib.SCHEMA)
        synthesized = read_guards(guard_path(game, variant), lib.SCHEMA)
        assert 0 < len(hand) < len(synthesized) and all(g.support == 0 for g in hand)
        assert certificate_violations(hand, load_npz(os.path.join(data, f"burnin_{game}_{variant}.npz")), lib.SCHEMA) == 0


def test_env_guards_hand_selects_the_hand_file_and_names_a_missing_one():
    env = EnvConfig(game="overcooked", layout="forced_coordination", horizon=4, n_agents=2, guards="hand")
    game = make_game(env, "options")
    assert len(game.guards) == 22 and {next(iter(g.when)) for g in game.guards} == {"held"}
    assert len(make_game(dataclasses.replace(env, guards=""), "options").guards) == 41
    with pytest.raises(FileNotFoundError, match="no hand-selected guard set for overcooked cramped_room"):
        make_game(dataclasses.replace(env, layout="cramped_room"), "options")
