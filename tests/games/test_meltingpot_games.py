"""Melting Pot Cleanup and Commons Harvest as games of the rollout engine (`omjax.games.meltingpot`)."""

import json
import os
import signal

import numpy as np
import pytest

from omjax.config import EnvConfig, load_config
from omjax.envs.meltingpot import CleanUp, CommonsHarvest
from omjax.envs.meltingpot.workers import RolloutWorkerError
from omjax.eval.cli import _Recorder
from omjax.games.meltingpot import engine_seed
from omjax.games.registry import guard_path, make_game
from omjax.interfaces.native import primitive_actions
from omjax.options import cleanup
from omjax.options import meltingpot as mp
from omjax.options.menu import episode_rng
from omjax.options.synthesis import read_guards
from omjax.prompts.memory import Memory

AGENTS = 7
STATE_FIELDS = ("step", "pos", "ori", "alive", "apples", "dirt", "reward", "ate", "cleaned", "patch_apples", "done")


def env_config(game: str, horizon: int, **kw) -> EnvConfig:
    layout = {"cleanup": "clean_up", "harvest": "commons_harvest__open"}[game]
    return EnvConfig(game=game, layout=layout, horizon=horizon, n_agents=AGENTS, **kw)


def assert_same_state(a, b, where: str) -> None:
    for name in STATE_FIELDS:
        assert np.array_equal(getattr(a, name), getattr(b, name)), f"{where}: {name} differs"


def test_cleanup_rollout_equals_the_adapter_loop():
    """Fixed choices through the Game give the menus, states and rewards of the documented option
    loop (`omjax.envs.meltingpot`) driven directly on one engine in this process."""
    horizon = 12
    seeds = [7, 2**32 - 3]  # the second is outside the engine's signed 32-bit seed range
    picks, menus, states, rewards = {}, {}, [], []
    pick = np.random.default_rng(0)
    with make_game(env_config("cleanup", horizon), "options") as game:
        game.reset(seeds)
        letters = [[episode_rng(s, a) for a in range(AGENTS)] for s in seeds]
        choices = np.zeros((len(seeds), AGENTS), np.int32)
        states.append(game.states)
        for t in range(horizon):
            for k, a in np.argwhere(game.needs_decision()):
                menu = game.menu(k, a, letters[k][a])
                picks[t, k, a] = int(pick.integers(len(menu)))
                menus[t, k, a] = menu
                choices[k, a] = menu[picks[t, k, a]].index
            rewards.append(game.step(choices))
            states.append(game.states)
        probes = [game.probes(k) for k in range(len(seeds))]
        returns = game.agent_returns()
    assert all(s.done for s in states[-1])

    lib = cleanup.LIBRARY.library("lib_a")
    guards = [g for g in read_guards(guard_path("cleanup", "lib_a"), cleanup.LIBRARY.SCHEMA) if g.opt in lib.schema.option_names]
    env = CleanUp(horizon)
    ctx = mp.make_ctx(env, cleanup.regions(env))
    for k, seed in enumerate(seeds):
        state = env.reset(engine_seed(seed))
        assert_same_state(state, states[0][k], f"rollout {k} reset")
        letters = [episode_rng(seed, a) for a in range(AGENTS)]
        running = [None] * AGENTS
        decisions = 0
        for t in range(horizon):
            for a in range(AGENTS):
                if running[a] is None:
                    items, insts = mp.menu(lib, ctx, state, a, guards, letters[a])
                    assert items == menus.pop((t, k, a)), f"rollout {k} step {t} agent {a}: menu differs"
                    running[a] = mp.start(lib, ctx, state, a, insts[items[picks[t, k, a]].index])
                    decisions += 1
            actions = np.array([mp.act(lib, ctx, running[a], state) for a in range(AGENTS)])
            state = env.step(actions)
            assert_same_state(state, states[t + 1][k], f"rollout {k} step {t + 1}")
            assert rewards[t][k] == state.reward.sum()  # the team reward: every agent's, summed
            for a in range(AGENTS):
                ex, outcome, _ = mp.advance(lib, ctx, running[a], int(actions[a]), state)
                running[a] = None if outcome is not None else ex
        assert probes[k].decisions.sum() == decisions and probes[k].steps == horizon
        assert probes[k].call_ratio == decisions / (horizon * AGENTS) < 1.0
        assert probes[k].visits.sum() == AGENTS * (horizon + 1)
    assert not menus, f"the Game asked for decisions the loop did not: {sorted(menus)}"
    assert np.array_equal(returns, np.stack([p.apples for p in probes]))


def test_harvest_menus_team_return_and_recorder_fields():
    horizon = 10
    seeds = [3, 4]
    with make_game(env_config("harvest", horizon), "options") as game:
        game.reset(seeds)
        ours = [[episode_rng(s, a) for a in range(AGENTS)] for s in seeds]
        reference = [[episode_rng(s, a) for a in range(AGENTS)] for s in seeds]
        choices = np.zeros((len(seeds), AGENTS), np.int32)
        team = np.zeros(len(seeds))
        patches = []
        for _ in range(horizon):
            for k, a in np.argwhere(game.needs_decision()):
                menu = game.menu(k, a, ours[k][a])
                expected, _ = mp.menu(game.lib, game.ctx, game.states[k], a, game.guards, reference[k][a])
                assert menu == expected
                eat = [it for it in menu if it.opt == "eat_apple"]
                choices[k, a] = (eat or menu)[0].index
            team += game.step(choices)
            patches.append(game.extras()["patches_alive"])
        assert team.min() > 0
        assert np.array_equal(team, game.agent_returns().sum(axis=1))  # +1 per apple, every agent's apples
        assert [game.probes(k).apples.sum() for k in range(2)] == team.tolist()
        assert game.positions().shape == (2, AGENTS, 2)
        assert game.walls().shape == game.layout.shape and not game.walls()[tuple(game.positions()[0, 0, ::-1])]
        assert np.array_equal(np.stack(patches)[:, 0], game.probes(0).patches_alive[1:])


def test_eval_recorder_reads_harvest_trajectories():
    horizon = 5
    with make_game(env_config("harvest", horizon), "options") as game:
        recorder = _Recorder(game)
        game.reset([10000])
        choices = np.zeros((1, AGENTS), np.int32)
        for _ in range(horizon):
            for k, a in np.argwhere(game.needs_decision()):
                choices[k, a] = game.menu(k, a, episode_rng(10000, a))[0].index
            game.step(choices)
            recorder(game)
        traj = recorder.trajectory(0)
        assert traj.positions.shape == (horizon, AGENTS, 2) and traj.patches_alive.shape == (horizon,)
        assert np.array_equal(traj.positions[-1], game.positions()[0, :, ::-1])  # (row, col)
        assert np.array_equal(traj.walls, ~game.layout.walkable)
        assert np.array_equal(recorder.agent_units, game.probes(0).apples[None].astype(float))


def test_native_interface_picks_primitive_actions_and_crash_names_the_seed():
    horizon = 4
    names = primitive_actions(CleanUp().substrate).names
    with make_game(env_config("cleanup", horizon), "native") as game:
        game.reset([5, 6])
        assert game.needs_decision().all()
        menu = game.menu(0, 3, np.random.default_rng(0))
        assert [it.letter for it in menu] == list("ABCDEFGHI") and tuple(it.opt for it in menu) == names
        assert menu[game.fallback(0, 3, menu)].opt == "noop"
        before = game.states
        turn = next(it.index for it in menu if it.opt == "turn right")
        game.step(np.full((2, AGENTS), turn))
        for k in range(2):
            assert np.array_equal(game.states[k].ori, (before[k].ori + 1) % 4)
            assert np.array_equal(game.states[k].pos, before[k].pos)
        fire = next(it.index for it in menu if it.opt == "fire clean")
        game.step(np.full((2, AGENTS), fire))
        assert game.probes(1).fire_clean.tolist() == [1] * AGENTS
        assert game.probes(1).call_ratio == 1.0
        assert "patches_alive" not in game.extras()  # Harvest only

        os.kill(game._pool.pid(1), signal.SIGKILL)
        with pytest.raises(RolloutWorkerError, match=r"^cleanup: the engine worker of rollout 1 crashed after 2 env "
                                                     r"steps: worker died: .*\(worker exit code -9\)$"):
            game.step(np.zeros((2, AGENTS), np.int64))
    harvest = make_game(env_config("harvest", horizon), "native")  # no reset: no workers started
    assert [it.opt for it in harvest.menu(0, 0, None)] == list(primitive_actions(CommonsHarvest().substrate).names)
    assert len(harvest.menu(0, 0, None)) == 8 and "fire clean" not in harvest.actions.names


def test_compound_json_resolves_replies_into_the_guardless_instances_and_counts_waste():
    """Ablation D on Harvest: a reply naming a visible apple runs that instance; garbage, unknown
    targets and bad arguments are counted invalid and fall back to wait; an option that ends
    without its effect is counted as a no-op."""
    horizon = 6
    with make_game(env_config("harvest", horizon), "compound_json") as game:
        assert "JSON object" in game.system_message() and "Pick one letter" not in game.system_message()
        game.reset([11])
        state = game.states[0]
        menus = {a: game.menu(0, a, None) for a in range(AGENTS)}
        for a, menu in menus.items():  # the guardless instantiation, in construction order
            assert [(it.opt, it.target) for it in menu] == [
                (game.lib.schema.options[i.opt].name, i.target) for i in mp.instances_for(game.lib, game.ctx, state, a)]
        x0, y0 = state.pos[0]
        apple = min((it for it in menus[0] if it.opt == "eat_apple"),
                    key=lambda it: abs(it.target[0] - x0) + abs(it.target[1] - y0))  # ends within the horizon
        wait = next(pos for pos, it in enumerate(menus[0]) if it.opt == "wait")
        text = game.user_message(0, 0, menus[0], Memory(3, 10))
        assert '"eat_apple" args {"target": [x, y]}' in text and "Reply with the JSON object only." in text
        assert "({}, {})".format(*apple.target) in text.partition("Target cells (x, y):")[2]
        assert "Action menu:" not in text
        x, y = apple.target
        replies = {0: f'Sure: {{"action": "eat_apple", "args": {{"target": [{x}, {y}]}}}}',
                   1: "I will eat an apple.", 2: '{"action": "eat_apple", "args": {"target": [-5, -5]}}',
                   3: '{"action": "dance"}', 4: '{"action": "wait", "args": {"target": [1, 2]}}',
                   5: '{"action": "wait", "args": {}}', 6: '{"action": "wait"}'}
        parsed = {a: game.parse_choice(0, a, menus[a], r) for a, r in replies.items()}
        assert menus[0][parsed[0]] == apple
        assert [parsed[a] for a in (1, 2, 3, 4)] == [None] * 4
        assert menus[5][parsed[5]].opt == menus[6][parsed[6]].opt == "wait"
        assert game.invalid_counts().tolist() == [[0, 1, 1, 1, 1, 0, 0]]
        choices = np.array([[parsed[a] if parsed[a] is not None else game.fallback(0, a, menus[a])
                             for a in range(AGENTS)]])
        assert choices[0, 1] == next(pos for pos, it in enumerate(menus[1]) if it.opt == "wait") and choices[0, 0] != wait
        game.step(choices)
        for _ in range(horizon - 1):
            for k, a in np.argwhere(game.needs_decision()):
                game.parse_choice(k, a, game.menu(k, a, None), "no json")
                choices[k, a] = game.fallback(k, a, game.menu(k, a, None))
            game.step(choices)
        tally = game.tallies[0]
        # Agent 0's one valid emission ate its apple (a success, not a no-op); agents 5 and 6 each
        # had one valid wait; everything else was invalid.
        assert game.agent_returns()[0, 0] == 1 and tally.noop.tolist() == [0] * AGENTS
        assert (tally.emitted - tally.invalid).tolist() == [1, 0, 0, 0, 0, 1, 1]
        assert tally.invalid[1:5].tolist() == [horizon] * 4
        assert game.extras()["patches_alive"].shape == (1,)


def test_make_game_rejects_what_melting_pot_does_not_have():
    with pytest.raises(ValueError, match="library variant"):
        make_game(EnvConfig(game="harvest", layout="asymmetric_advantages", n_agents=AGENTS), "options")
    with pytest.raises(ValueError, match="has 7 agents"):
        make_game(EnvConfig(game="cleanup", layout="lib_b", n_agents=2), "options")


SMALL = ["train.rollouts=2", "train.rounds=1", "train.minibatch_size=4", "lora.rank=2", "lora.targets=q,v",
         "run.progress=false", "env.horizon=2", "model.name=tiny"]


@pytest.mark.parametrize("game, interface", [("cleanup", "options"), ("harvest", "options"), ("cleanup", "compound_json")])
def test_one_training_round_writes_metrics(game, interface, tiny_model, tmp_path):
    from omjax.train.trainer import Trainer

    run = tmp_path / "run"
    extra = ["policy.action_interface=compound_json", "policy.decision_mode=sample", "policy.max_new_tokens=6"] \
        if interface == "compound_json" else []
    cfg = load_config(f"configs/base/{game}.yaml", [*SMALL, *extra, f"run.out_dir={run}"])
    trainer = Trainer(cfg, model=tiny_model)
    try:
        rows = trainer.run()
    finally:
        trainer.game.close()
    assert len(rows) == 1
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert len(row["team_returns"]) == 2 and all(np.isfinite(row["team_returns"]))
    assert len(row["decisions_per_agent"]) == AGENTS and min(row["decisions_per_agent"]) >= 2  # all decide at t=0
    assert 0.0 < row["call_ratio"] <= 1.0
    records = [json.loads(line) for line in (run / "decisions" / "round_0000.jsonl").read_text().splitlines()]
    assert len(records) == sum(row["decisions_per_agent"]) and {r["agent"] for r in records} == set(range(AGENTS))
    assert (run / "checkpoints").is_dir()
