import sys, time, jax, jax.numpy as jnp, numpy as np
from types import SimpleNamespace
from omjax.models import configs
from omjax.bench import gpu as g
name = sys.argv[1]
cfg, abstract = configs.abstract_params(name, jnp.bfloat16)
fam = configs._family(configs._text(configs.published(name))["model_type"])
model = SimpleNamespace(family=fam, config=cfg, params=abstract)
for agents in (2,):
    policy, bank, bank_rows, inputs, keys, n = g.decide_case(model, agents, 5, 768)
    t = time.time()
    low = policy._decide.lower(abstract, bank, None, jnp.asarray(bank_rows, jnp.int32), inputs, keys, False)
    t1 = time.time(); low.compile(); print(name, f"decide A{agents}: lower {t1-t:.1f} s, compile {time.time()-t1:.1f} s", flush=True)
update, bank, state, batch, keys, active, settings = g.update_case(model, 5, 16, 768)
t = time.time(); low = update.lower(abstract, bank, state, batch, keys, active)
t1 = time.time(); low.compile(); print(name, f"update: lower {t1-t:.1f} s, compile {time.time()-t1:.1f} s", flush=True)
