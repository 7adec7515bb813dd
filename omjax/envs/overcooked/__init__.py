"""JAX-native Overcooked-AI (`overcooked_ai_py` 1.1.0 dynamics) as a JaxMARL `MultiAgentEnv`.

`Overcooked(layout, horizon)` is the env; `State` its pytree state; `Layout` the static layout
parsed from overcooked_ai_py's `.layout` files; `pot_phase` / `PotPhase` the pot phases; `Item` the
item codes (soups carry their ingredient counts); `render_text` / `render_ascii` / `render_rgb`
the renderers. `omjax.envs.overcooked.reference` converts to and from overcooked_ai_py states.
"""

from omjax.envs.overcooked.env import (
    EVENTS,
    OBS_CHANNELS,
    POT_IDLE,
    Overcooked,
    State,
    initial_state,
    pot_cook_time,
    pot_phase,
    random_actions,
    transition,
)
from omjax.envs.overcooked.items import (
    DIRECTION_NAMES,
    NUM_ACTIONS,
    Action,
    Direction,
    Item,
    PotPhase,
    is_soup,
    item_name,
    soup_item,
    soup_onions,
    soup_tomatoes,
)
from omjax.envs.overcooked.render import render_ascii, render_rgb, render_text
from omjax.envs.overcooked.layout import MAX_INGREDIENTS, Layout, Terrain, list_layouts, load_layout

__all__ = [
    "Action", "DIRECTION_NAMES", "Direction", "EVENTS", "Item", "Layout", "MAX_INGREDIENTS",
    "NUM_ACTIONS", "OBS_CHANNELS", "Overcooked", "POT_IDLE", "PotPhase", "State", "Terrain",
    "initial_state", "is_soup", "item_name", "list_layouts", "load_layout", "pot_cook_time",
    "pot_phase", "random_actions", "render_ascii", "render_rgb", "render_text", "soup_item", "soup_onions", "soup_tomatoes", "transition",
]
