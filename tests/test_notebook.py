"""The walkthrough notebook runs top to bottom (nbclient), with a tiny model and SmolLM2."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough_overcooked.ipynb"


def _execute(env: dict, timeout: int) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOK.parents[1])}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return notebook


def _outputs(notebook) -> str:
    return "\n".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.mark.slow
def test_notebook_runs_with_a_tiny_model(tmp_path):
    from tests.eval.tiny_model import write_tiny_llama

    model_dir = write_tiny_llama(tmp_path / "tiny_llama")
    notebook = _execute({"OMJAX_NOTEBOOK_MODEL": str(model_dir), "OMJAX_NOTEBOOK_HORIZON": "3",
                         "OMJAX_NOTEBOOK_OVERRIDES": "lora.top_layers=0",
                         "JAX_PLATFORMS": "cpu"}, timeout=900)
    text = _outputs(notebook)
    assert "guards adopted, certificate violations: 0" in text
    assert "'coordination_certified': True" in text  # the Forced Coordination control
    assert "round 1: team returns" in text
    assert any(o.get("output_type") == "display_data" and "image/png" in o.get("data", {})
               for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []))


@pytest.mark.slow
def test_notebook_runs_with_smollm2_in_15_minutes():
    notebook = _execute({"JAX_PLATFORMS": "cpu"}, timeout=900)
    assert "round 1: team returns" in _outputs(notebook)
