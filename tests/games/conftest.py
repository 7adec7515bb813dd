# The Melting Pot training-round tests use the same tiny model as tests/train.
from tests.train.conftest import tiny_model  # noqa: F401
