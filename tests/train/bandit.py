"""A one-decision-per-step menu game for tests: option `pay` scores 1 for the team, the others 0.

Every agent decides at every step (each option lasts one step), letters are fixed, so a policy
that learns puts more probability on the `pay` letter. `flat=True` makes every option pay the
same, so every cohort has zero spread.
"""

import numpy as np

from omjax.games.base import Game
from omjax.options.menu import MenuItem

OPTIONS = ("wait", "pick", "pay", "drop")
PAY = OPTIONS.index("pay")


class MenuBandit(Game):
    game = "bandit"
    interface = "options"
    delivery_reward = 1.0

    def __init__(self, n_agents: int, horizon: int, flat: bool = False, fail_at_call: int | None = None,
                 labels: tuple[str, ...] = ("now", "wait")):
        self.n_agents, self.horizon, self.flat = n_agents, horizon, flat
        self.labels = labels
        self.fail_at_call = fail_at_call
        self.calls = 0
        self.k = 0

    def reset(self, seeds):
        self.k = len(seeds)
        self.returns = np.zeros((self.k, self.n_agents))

    @property
    def n_episodes(self):
        return self.k

    def needs_decision(self):
        return np.ones((self.k, self.n_agents), bool)

    def menu(self, k, agent, rng):
        return [MenuItem(chr(65 + j), j, name, None, f"{name} now") for j, name in enumerate(OPTIONS)]

    def fallback(self, k, agent, menu):
        return 0

    def system_message(self):
        return "you are agent . pick option"

    def user_message(self, k, agent, menu, memory):
        return "you are player . menu :\n" + "\n".join(f"{it.letter} ) {it.label}" for it in menu)

    def state_labels(self):
        return self.labels

    def state_label(self, k, agent):
        return self.labels[0]

    parse_choice = Game.parse_choice

    def step(self, choices):
        self.calls += 1
        if self.fail_at_call is not None and self.calls == self.fail_at_call:
            raise KeyboardInterrupt("simulated kill")
        paid = np.ones((self.k, self.n_agents)) / self.n_agents if self.flat else (np.asarray(choices) == PAY) * 1.0
        self.returns += paid
        return paid.sum(axis=1)

    def positions(self):
        return np.zeros((self.k, self.n_agents, 2), np.int64)  # everyone on the one floor cell

    def walls(self):
        return np.zeros((1, 1), bool)

    def agent_returns(self):
        return self.returns.copy()
