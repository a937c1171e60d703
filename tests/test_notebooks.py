"""The notebooks under ``notebooks/``: stored clean, and they run without error.

Execution starts a Jupyter kernel per notebook (nbclient, kernel ``python3``)
and fails on the first cell that raises. It takes about a minute per notebook
on 2 CPU cores, so those tests carry the ``notebooks`` marker: deselect them
with ``pytest -m "not notebooks"``. The hygiene checks (no outputs, no
execution counts) read the JSON directly and always run.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
EXPECTED = ("01_estimate_grpo_step.ipynb", "02_layout_search.ipynb", "03_calibration.ipynb",
            "04_what_if.ipynb", "05_beyond.ipynb")
# Figures each notebook must render (PNG outputs): a plot that silently stops
# drawing fails here.
MIN_FIGURES = {"01_estimate_grpo_step.ipynb": 4, "02_layout_search.ipynb": 2,
               "03_calibration.ipynb": 1, "04_what_if.ipynb": 4, "05_beyond.ipynb": 4}
CELL_TIMEOUT_S = 300
KERNEL = "python3"


def _load(path: pathlib.Path) -> dict:
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def test_every_expected_notebook_is_present():
  assert sorted(p.name for p in NOTEBOOKS) == sorted(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path):
  nb = _load(path)
  assert nb["nbformat"] == 4
  assert nb["metadata"]["kernelspec"]["name"] == KERNEL
  code = [c for c in nb["cells"] if c["cell_type"] == "code"]
  assert 8 <= len(nb["cells"]) <= 15, f"{path.name}: {len(nb['cells'])} cells; keep it short"
  for i, cell in enumerate(code):
    assert cell["outputs"] == [], f"{path.name}: code cell {i} has stored outputs"
    assert cell["execution_count"] is None, f"{path.name}: code cell {i} has an execution count"
    assert "execution" not in cell.get("metadata", {}), (
        f"{path.name}: code cell {i} has execution timing metadata")
  ids = [c.get("id") for c in nb["cells"]]
  assert len(set(ids)) == len(ids), f"{path.name}: cell ids must be unique"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
  """Headless matplotlib, and a ``python3`` kernel spec for this interpreter.

  When no ``python3`` spec is found, one is installed under a temporary prefix
  (``python -m ipykernel install --prefix``) and put on ``JUPYTER_PATH`` for
  the tests of this module only; nothing under the user's home changes.
  """
  pytest.importorskip("nbformat", reason="needs the notebooks extra: pip install -e .[notebooks]")
  pytest.importorskip("nbclient", reason="needs the notebooks extra: pip install -e .[notebooks]")
  pytest.importorskip("ipykernel", reason="needs the notebooks extra: pip install -e .[notebooks]")
  from jupyter_client.kernelspec import KernelSpecManager  # pylint: disable=g-import-not-at-top
  saved = {k: os.environ.get(k) for k in ("MPLBACKEND", "JUPYTER_PATH")}
  os.environ["MPLBACKEND"] = "Agg"
  if KERNEL not in KernelSpecManager().find_kernel_specs():
    prefix = tmp_path_factory.mktemp("kernel")
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix),
                    "--name", KERNEL], check=True, capture_output=True)
    paths = [str(prefix / "share" / "jupyter")] + ([saved["JUPYTER_PATH"]]
                                                    if saved["JUPYTER_PATH"] else [])
    os.environ["JUPYTER_PATH"] = os.pathsep.join(paths)
    assert KERNEL in KernelSpecManager().find_kernel_specs()
  yield
  for k, v in saved.items():
    if v is None:
      os.environ.pop(k, None)
    else:
      os.environ[k] = v


# 05_beyond sizes the job of tests/test_sizing_relax.py: run on that module's
# worker (pytest-xdist ``--dist loadgroup``), whose compilation cache
# (``RLCOST_JAX_CACHE``, inherited by the kernel) then holds its programs.
GROUPS = {"05_beyond.ipynb": "sizing"}


@pytest.mark.notebooks
@pytest.mark.parametrize("path", [
    pytest.param(p, marks=[pytest.mark.xdist_group(GROUPS[p.name])] if p.name in GROUPS else [])
    for p in NOTEBOOKS], ids=lambda p: p.name)
def test_notebook_runs(path, kernel_env):
  import nbclient  # pylint: disable=g-import-not-at-top
  import nbformat  # pylint: disable=g-import-not-at-top
  del kernel_env
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL,
                                   resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
  client.execute()  # raises CellExecutionError on the first failing cell
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
  errors = [o for o in outputs if o.output_type == "error"]
  assert not errors, f"{path.name}: {[(o.ename, o.evalue) for o in errors]}"
  tracebacks = [o.text for o in outputs
                if o.output_type == "stream" and "Traceback" in o.text]
  assert not tracebacks, f"{path.name}: a cell printed a traceback:\n{tracebacks[0]}"
  figures = sum("image/png" in o.get("data", {}) for o in outputs)
  assert figures >= MIN_FIGURES[path.name], (
      f"{path.name}: rendered {figures} figures, expected at least {MIN_FIGURES[path.name]}")
