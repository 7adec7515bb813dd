import pytest

from tests.eval.tiny_model import write_tiny_llama


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """See `write_tiny_llama`: a whole PA-MAGRPO round on Overcooked runs in seconds with it."""
    return write_tiny_llama(tmp_path_factory.mktemp("tiny_llama_eval"))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    from omjax.models import load

    return load(tiny_model_dir)
