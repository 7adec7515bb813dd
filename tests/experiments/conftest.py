from tests.eval.conftest import tiny_model_dir  # noqa: F401  (the same tiny random Llama)
