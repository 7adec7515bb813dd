"""Every registered (game, action interface) pair honours the `Game` interface on the real engines.

Reset, a few env steps with the replies a policy would write, menus, prompts, reply parsing and
extras, with shapes and types asserted. The Melting Pot pairs run the real engine (one worker per
game and interface, built once for the module); K = 1 there and 2 for Overcooked.
"""

import dataclasses
import json

import numpy as np
import pytest

from omjax.config import EnvConfig
from omjax.games import GAMES, Game, make_game
from omjax.options.menu import MenuItem
from omjax.prompts.interface import INTERFACES
from omjax.prompts.memory import Memory
from tests.prompts.test_no_advice import advised

STEPS = 3
SETUPS = {  # game -> (layout, agents, episodes K)
    "overcooked": ("asymmetric_advantages", 2, 2),
    "cleanup": ("clean_up", 7, 1),
    "harvest": ("commons_harvest__open", 7, 1),
}
PAIRS = [(g, i) for g in GAMES for i in INTERFACES]


def test_every_game_has_a_setup_here():
    assert set(SETUPS) == set(GAMES)


@dataclasses.dataclass
class Seen:
    """One decision as the rollout engine meets it (read between `menu` and `step`)."""

    step: int
    menu: list[MenuItem]
    fallback: int
    state_label: str
    user: str | None
    """The user message (of the first decision of each step only: rendering costs time)."""
    pick: int
    parsed: int | None
    """`parse_choice` of the reply a policy meaning `menu[pick]` writes."""
    garbage: int | None
    """`parse_choice` of a reply naming nothing."""


@pytest.fixture(scope="module", params=PAIRS, ids=[f"{g}-{i}" for g, i in PAIRS])
def played(request):
    """(game, K, deciding [STEPS, K, A], decisions, positions [STEPS, K, A, 2], rewards [STEPS, K])
    after STEPS env steps; the game stays open for the module."""
    name, interface = request.param
    layout, agents, k = SETUPS[name]
    game = make_game(EnvConfig(game=name, layout=layout, horizon=STEPS + 2, n_agents=agents), interface)
    game.reset([100 + j for j in range(k)])
    rng = np.random.default_rng(0)
    deciding, seen, positions, rewards = [], [], [], []
    for t in range(STEPS):
        deciding.append(game.needs_decision())
        choices = np.zeros((k, game.n_agents), np.int64)
        for n, (e, a) in enumerate(np.argwhere(deciding[-1])):
            e, a = int(e), int(a)
            menu = game.menu(e, a, np.random.default_rng([e, a]))
            pick = int(rng.integers(len(menu)))
            d = Seen(step=t, menu=menu, fallback=game.fallback(e, a, menu), state_label=game.state_label(e, a),
                     user=game.user_message(e, a, menu, Memory(3, 10)) if n == 0 else None, pick=pick,
                     garbage=game.parse_choice(e, a, menu, "I am not sure what to do."),
                     parsed=game.parse_choice(e, a, menu, _reply(game, e, a, menu[pick])))
            seen.append(d)
            choices[e, a] = menu[d.fallback if d.parsed is None else d.parsed].index
        rewards.append(game.step(choices))
        positions.append(game.positions())
    yield game, k, np.stack(deciding), seen, np.stack(positions), np.stack(rewards)
    game.close()


def _reply(game: Game, k: int, agent: int, item: MenuItem) -> str:
    """What a policy that means `item` writes under the game's interface."""
    if game.interface == "compound_json":
        args = {} if item.target is None else {"target": list(item.target)}
        return json.dumps({"action": item.opt, "args": args})
    return f"state: {game.state_label(k, agent)}\nchoice: {item.letter}"


def test_static_facts(played):
    game = played[0]
    assert isinstance(game, Game) and game.game in GAMES and game.interface in INTERFACES
    assert game.n_agents == SETUPS[game.game][1] and game.horizon == STEPS + 2
    assert game.delivery_reward > 0
    labels = game.state_labels()
    assert labels and all(isinstance(s, str) and s for s in labels)
    system = game.system_message()
    assert isinstance(system, str) and f"{game.n_agents}-player" in system
    if game.interface == "compound_json":
        assert "JSON object" in system and "choice:" not in system
    else:
        assert f"state: <{' | '.join(labels)}>" in system and "choice: <single capital letter>" in system


def test_decisions_menus_and_prompts(played):
    game, k, deciding, seen, _, _ = played
    assert deciding.dtype == bool and deciding.shape == (STEPS, k, game.n_agents)
    assert deciding[0].all()  # everyone chooses at the start
    assert len(seen) == deciding.sum()
    if game.interface == "native":
        assert deciding.all()  # one decision per agent per step
    for d in seen:
        assert d.menu and all(isinstance(it, MenuItem) for it in d.menu)
        assert len({it.letter for it in d.menu}) == len(d.menu)
        assert isinstance(d.fallback, int) and 0 <= d.fallback < len(d.menu)
        assert d.state_label in game.state_labels()
    users = [d for d in seen if d.user is not None]
    assert users and (game.interface != "native" or len(users) == STEPS)
    for d in users:
        assert isinstance(d.user, str) and "Memory:" in d.user
        assert advised(game.system_message()) == advised(d.user) == []  # no strategy advice by default
        if game.interface == "compound_json":
            assert "Actions you can write:" in d.user and d.user.endswith("Reply with the JSON object only.")
        else:
            assert "Action menu:" in d.user and all(f"{it.letter}) " in d.user for it in d.menu)


def test_replies_parse_to_what_they_name_and_garbage_to_none(played):
    seen = played[3]
    for d in seen:
        assert d.garbage is None and d.parsed is not None
        assert (d.menu[d.parsed].opt, d.menu[d.parsed].target) == (d.menu[d.pick].opt, d.menu[d.pick].target)


def test_steps_rewards_positions_walls_returns_extras(played):
    game, k, deciding, _, positions, rewards = played
    assert rewards.shape == (STEPS, k) and rewards.dtype == np.float64 and np.all(rewards >= 0)
    walls = game.walls()
    assert walls.dtype == bool and walls.ndim == 2 and walls.any() and not walls.all()
    assert positions.shape == (STEPS, k, game.n_agents, 2) and np.issubdtype(positions.dtype, np.integer)
    x, y = positions[..., 0], positions[..., 1]
    assert np.all((0 <= x) & (x < walls.shape[1]) & (0 <= y) & (y < walls.shape[0]))
    assert not walls[y, x].any()
    returns = game.agent_returns()
    assert returns.shape == (k, game.n_agents) and returns.dtype == np.float64 and np.all(returns >= 0)
    extras = game.extras()
    assert all(isinstance(v, np.ndarray) and v.shape[0] == k for v in extras.values())
    expected = {"overcooked": {"deliveries"}, "cleanup": {"eaten", "cleaned"},
                "harvest": {"eaten", "cleaned", "patches_alive"}}[game.game]
    if game.interface == "compound_json":
        expected |= {"invalid_emissions", "noop_emissions"}
    assert set(extras) == expected
    per_agent = [v for name, v in extras.items() if name != "patches_alive"]
    assert all(v.shape == (k, game.n_agents) and np.issubdtype(v.dtype, np.integer) for v in per_agent)
    if "patches_alive" in extras:
        assert extras["patches_alive"].shape == (k,) and np.all(extras["patches_alive"] >= 0)
    if game.interface == "compound_json":  # one garbage reply per decision, each counted invalid
        np.testing.assert_array_equal(extras["invalid_emissions"], deciding.sum(axis=0))
