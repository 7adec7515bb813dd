"""`pip install omjax` (no extras) gives the environments, option libraries and backbones: they
import and run in a fresh interpreter where no extra's package can be imported."""

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EXTRA_MODULES = {"optax", "orbax", "chex", "scipy", "matplotlib", "transformers", "safetensors", "accelerate",
                 "sentencepiece", "torch", "meltingpot", "dmlab2d", "tensorflow", "peft"}
"""Import names of the extras' packages (and of the reference libraries the tests compare with).
`overcooked_ai_py` is located for its `.layout` data files but never imported (its declared
dependencies are a GUI stack, so it is installed with `--no-deps`: install.sh, README)."""


def test_the_extras_hold_what_the_core_does_not_need():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {d.split("=")[0].split(">")[0].split("[")[0].strip().lower() for d in project["dependencies"]}
    assert core == {"jax", "flax", "numpy", "jaxmarl", "gguf", "pyyaml", "tqdm"}
    extras = project["optional-dependencies"]
    assert {"train", "hf", "meltingpot", "dev"} <= set(extras)
    assert "optax" in extras["train"] and "orbax-checkpoint" in extras["train"]
    assert any(d.startswith("transformers") for d in extras["hf"])


def test_envs_options_and_models_run_without_the_extras():
    script = textwrap.dedent(f"""
        import importlib.abc, sys
        BLOCKED = {sorted(EXTRA_MODULES)!r}

        class Hide(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is an extra's package")

        sys.meta_path.insert(0, Hide())
        import jax, jax.numpy as jnp, numpy as np
        from omjax.envs.overcooked import Overcooked
        import omjax.options, omjax.models
        from omjax.models import family
        env = Overcooked("asymmetric_advantages", horizon=4)
        obs, state = env.reset(jax.random.PRNGKey(0))
        obs, state, reward, done, info = env.step(jax.random.PRNGKey(1), state, {{a: 0 for a in env.agents}})
        fam = family("llama")
        assert callable(fam.forward)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {{*BLOCKED, "overcooked_ai_py"}})
        assert not loaded, loaded
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
