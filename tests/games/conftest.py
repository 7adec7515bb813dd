# The Melting Pot training-round tests use the same tiny model and compile cache as tests/train.
from tests.train.conftest import compile_cache, tiny_model  # noqa: F401
