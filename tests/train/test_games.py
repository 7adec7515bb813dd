"""The Overcooked game adapter: rewards read off state changes equal the env's own."""

import jax
import jax.numpy as jnp
import numpy as np

from omjax.envs.overcooked import initial_state, load_layout, transition
from omjax.envs.overcooked.items import Action, Item
from omjax.train.games import delivery_rewards


def random_states(layout, key, n):
    """n states with agents on random distinct floor cells, random facings and held items."""
    floor = jnp.asarray(layout.floor_pos)
    base = initial_state(layout)
    k1, k2, k3 = jax.random.split(key, 3)
    picks = jax.vmap(lambda k: jax.random.choice(k, floor.shape[0], (2,), replace=False))(jax.random.split(k1, n))
    items = jnp.array([Item.NONE, Item.ONION, Item.DISH, Item.SOUP_1, Item.SOUP_3])
    held = items[jax.random.randint(k2, (n, 2), 0, len(items))]
    facing = jax.random.randint(k3, (n, 2), 0, 4)
    return jax.vmap(lambda p, h, f: base.replace(pos=floor[p], held=h, facing=f))(picks, held, facing)


def test_delivery_reward_equals_transition_sparse_reward():
    layout = load_layout("asymmetric_advantages")
    n = 4000
    states = random_states(layout, jax.random.key(0), n)
    # Mostly INTERACT so that deliveries happen often.
    actions = jnp.where(jax.random.bernoulli(jax.random.key(1), 0.7, (n, 2)), int(Action.INTERACT),
                        jax.random.randint(jax.random.key(2), (n, 2), 0, 6))

    def both(s, a):
        nxt, sparse, _, _ = transition(layout, s, a)
        return jnp.sum(sparse), delivery_rewards(layout, s, nxt)

    want, got = jax.jit(jax.vmap(both))(states, actions)
    assert float(jnp.sum(want)) >= 20 * 10  # the sample contains real deliveries
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
