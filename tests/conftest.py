import os
import shutil
import tempfile

import pytest

# Tests run on the CPU; keep XLA from grabbing every core's worth of threads per process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# One compilation-cache directory for the whole test run: the xdist workers and every subprocess
# a test starts inherit it from the process that made it. Tests build their own jitted functions
# (a Trainer per test), so identical programs recur across tests and workers; with the cache each
# compiles once per run. It starts empty on every run (a fresh machine's timing) and its maker
# removes it at the end.
_MADE_CACHE = "OMJAX_TEST_XLA_CACHE" not in os.environ
if _MADE_CACHE:
    os.environ["OMJAX_TEST_XLA_CACHE"] = tempfile.mkdtemp(prefix="omjax-test-xla-")
os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ["OMJAX_TEST_XLA_CACHE"]
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"


@pytest.fixture(scope="session", autouse=True)
def compile_cache():
    import jax

    jax.config.update("jax_compilation_cache_dir", os.environ["OMJAX_TEST_XLA_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    yield


def pytest_sessionfinish(session):
    if _MADE_CACHE:
        shutil.rmtree(os.environ["OMJAX_TEST_XLA_CACHE"], ignore_errors=True)
