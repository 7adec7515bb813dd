"""A one-decision-per-step menu game for tests: one option scores 1 for the team, the others 0.

Every agent decides at every step (each option lasts one step). By default the letters are
fixed and option `pay` pays every agent, so a policy that learns puts more probability on the
`pay` letter; `flat=True` makes every option pay the same, so every cohort has zero spread.

`shuffle=True` draws the letters from the rollout's letter RNG like the real menus do, so the
paying option sits at a different letter from decision to decision and a policy can find it
only by reading the menu text. Training menus use only the even permutations of the options;
`HELD_OUT_ORDERS` are the odd ones, never seen in training, on which learning is measured.
`paying[i]` names the option that pays when agent i picks it (default `pay` for everyone).
"""

import itertools

import numpy as np

from omjax.games.base import Game
from omjax.options.menu import MenuItem, check_menu_format, letter, render_menu

OPTIONS = ("wait", "pick", "pay", "drop")
PAY = OPTIONS.index("pay")
LABELS = {"wait": "wait here", "pick": "pick up an onion", "pay": "deliver the soup", "drop": "drop what you hold"}


def _parity(perm) -> int:
    """0 for an even permutation, 1 for an odd one (inversion count mod 2)."""
    return sum(a > b for a, b in itertools.combinations(perm, 2)) % 2


PERMUTATIONS = list(itertools.permutations(range(len(OPTIONS))))
TRAIN_ORDERS = [p for p in PERMUTATIONS if _parity(p) == 0]
HELD_OUT_ORDERS = [p for p in PERMUTATIONS if _parity(p) == 1]


def menu_of(order) -> list[MenuItem]:
    """The shuffled-mode menu listing OPTIONS[order[k]] under letter k."""
    return [MenuItem(letter(k), j, OPTIONS[j], None, LABELS[OPTIONS[j]]) for k, j in enumerate(order)]


class MenuBandit(Game):
    game = "bandit"
    interface = "options"
    delivery_reward = 1.0

    def __init__(self, n_agents: int, horizon: int, flat: bool = False, fail_at_call: int | None = None,
                 labels: tuple[str, ...] = ("now", "wait"), shuffle: bool = False,
                 paying: tuple[str, ...] | None = None, reward_noise: float = 0.0,
                 menu_format: str = "letter_first"):
        self.n_agents, self.horizon, self.flat, self.shuffle = n_agents, horizon, flat, shuffle
        check_menu_format(menu_format)
        self.menu_format = menu_format  # how the shuffled menu writes its lines (`env.menu_format`)
        if reward_noise < 0:
            raise ValueError(f"reward_noise must be >= 0, got {reward_noise}")
        self.reward_noise = float(reward_noise)  # sd of N(0, sd^2) added to each step's team reward
        self.labels = labels
        paying = paying or ("pay",) * n_agents
        if len(paying) != n_agents or any(p not in OPTIONS for p in paying):
            raise ValueError(f"paying must name one of {OPTIONS} per agent ({n_agents}), got {paying}")
        self.paying = np.array([OPTIONS.index(p) for p in paying])  # [A]
        self.fail_at_call = fail_at_call
        self.calls = 0
        self.k = 0

    def reset(self, seeds):
        self.k = len(seeds)
        self.returns = np.zeros((self.k, self.n_agents))
        self.noise_rng = np.random.default_rng([int(s) for s in seeds])

    @property
    def n_episodes(self):
        return self.k

    def needs_decision(self):
        return np.ones((self.k, self.n_agents), bool)

    def menu(self, k, agent, rng):
        if self.shuffle:
            return menu_of(TRAIN_ORDERS[int(rng.integers(len(TRAIN_ORDERS)))])
        return [MenuItem(chr(65 + j), j, name, None, f"{name} now") for j, name in enumerate(OPTIONS)]

    def fallback(self, k, agent, menu):
        return next(pos for pos, it in enumerate(menu) if it.opt == "wait")

    def system_message(self):
        if not self.shuffle:
            return "you are agent . pick option"
        return ("You are an agent in a 2-player cooperative kitchen. Some actions score points for the "
                "team. The action menu lists the actions you can take. Pick one letter.\n\n"
                f"Output format (exactly two lines, nothing else):\nstate: <{' | '.join(self.labels)}>\n"
                "choice: <single capital letter>")

    def user_message(self, k, agent, menu, memory):
        if not self.shuffle:
            return "you are player . menu :\n" + "\n".join(f"{it.letter} ) {it.label}" for it in menu)
        return (f"You are player {agent}.\n\nAction menu:\n{render_menu(menu, self.menu_format)}\n\n"
                "Choose one. Reply with exactly two lines.")

    def state_labels(self):
        return self.labels

    def state_label(self, k, agent):
        return self.labels[0]

    parse_choice = Game.parse_choice

    def step(self, choices):
        self.calls += 1
        if self.fail_at_call is not None and self.calls == self.fail_at_call:
            raise KeyboardInterrupt("simulated kill")
        if self.flat:
            paid = np.ones((self.k, self.n_agents)) / self.n_agents
        else:
            paid = (np.asarray(choices) == self.paying[None, :]) * 1.0  # [K, A]
        self.returns += paid
        team = paid.sum(axis=1)
        if self.reward_noise:
            team = team + self.noise_rng.normal(0.0, self.reward_noise, self.k)
        return team

    def positions(self):
        return np.zeros((self.k, self.n_agents, 2), np.int64)  # everyone on the one floor cell

    def walls(self):
        return np.zeros((1, 1), bool)

    def agent_returns(self):
        return self.returns.copy()
