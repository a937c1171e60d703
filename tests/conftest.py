"""Shared fixtures and helpers of the test suite.

The only global JAX setting changed here is the persistent compilation cache
(a directory per test run, see ``_jax_cache_in_tmp``). Tests that need float64 use
the ``x64`` fixture (or ``jax.enable_x64(True)`` as a context manager), which
restores the previous setting when the test ends.
"""

from __future__ import annotations

import os
import re

# The suite compiles thousands of small programs (each primitive an eager cost
# model call meets, each test's own jit) and runs most of them a few times, so
# it compiles them with XLA's classic CPU emitters, which halve an eager
# estimate's first call and cut the suite's time by about a seventh.
# Compile-time only: results agree to float32 rounding, and programs compiled
# with options of their own (the search's, :mod:`costmodel.internal.xla_options`) keep
# them. Set here,
# before JAX creates its CPU client; subprocesses (the command-line tests, the
# notebook kernels) inherit it.
#
# Backend optimisation level 0 and LLVM without its expensive passes compile
# those eager programs faster again (about a tenth of an eager-heavy test
# file's CPU time): IEEE arithmetic without fast-math, so the same results.
_FAST_COMPILE_FLAGS = {"--xla_cpu_use_fusion_emitters": "false",
                       "--xla_backend_optimization_level": "0",
                       "--xla_llvm_disable_expensive_passes": "true"}
for _flag, _value in _FAST_COMPILE_FLAGS.items():
  if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_flag}={_value}".strip()

import jax  # noqa: E402 (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import costmodel as cm  # noqa: E402
from costmodel._src.specs.model import ModelSpec  # noqa: E402

# Relative and absolute tolerances keyed by dtype: a few ulps of accumulated
# rounding through the cost model's chains of products and logs.
_TOLERANCES = {
    np.dtype(np.float16): (1e-2, 1e-3),
    np.dtype(jnp.bfloat16): (2e-2, 1e-2),
    np.dtype(np.float32): (1e-5, 1e-7),
    np.dtype(np.float64): (1e-11, 1e-14),
}


def tolerance(dtype) -> tuple[float, float]:
  """``(rtol, atol)`` for comparing arrays of ``dtype`` (integers: exact)."""
  dtype = np.dtype(dtype)
  if not np.issubdtype(dtype, np.floating) and dtype != np.dtype(jnp.bfloat16):
    return 0.0, 0.0
  return _TOLERANCES[dtype]


def tree_allclose(a, b, rtol: float | None = None, atol: float | None = None) -> bool:
  """True when two pytrees have the same structure and close leaves.

  Tolerances default to the looser of the two leaves' dtype tolerances.
  Static fields (names, roles, modes) are part of the structure, so they must
  be equal.
  """
  leaves_a, tree_a = jax.tree_util.tree_flatten(a)
  leaves_b, tree_b = jax.tree_util.tree_flatten(b)
  if tree_a != tree_b:
    return False
  for x, y in zip(leaves_a, leaves_b, strict=True):
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape:
      return False
    r_def, a_def = max(tolerance(x.dtype), tolerance(y.dtype))
    if not np.allclose(x, y, rtol=r_def if rtol is None else rtol,
                       atol=a_def if atol is None else atol, equal_nan=False):
      return False
  return True


def assert_tree_allclose(a, b, rtol: float | None = None, atol: float | None = None) -> None:
  """Asserts :func:`tree_allclose`, printing the first differing leaf."""
  if tree_allclose(a, b, rtol, atol):
    return
  leaves_a, tree_a = jax.tree_util.tree_flatten(a)
  leaves_b, tree_b = jax.tree_util.tree_flatten(b)
  assert tree_a == tree_b, f"tree structures differ:\n{tree_a}\n{tree_b}"
  for i, (x, y) in enumerate(zip(leaves_a, leaves_b, strict=True)):
    x, y = np.asarray(x), np.asarray(y)
    r_def, a_def = max(tolerance(x.dtype), tolerance(y.dtype))
    np.testing.assert_allclose(x, y, rtol=r_def if rtol is None else rtol,
                               atol=a_def if atol is None else atol, err_msg=f"leaf {i}")


# A module that defines a module-scoped fixture (a search, an enumeration, a
# set of estimates) runs on one pytest-xdist worker (``--dist loadgroup``):
# sent test by test, every worker would build the fixture.
_MODULE_FIXTURE = re.compile(r"@pytest\.fixture\([^)]*scope=\"module\"")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
  """Groups the tests of each module that defines a module-scoped fixture (the
  xdist group is the module's name); a test already in a group keeps it."""
  shares: dict = {}
  for item in items:
    path = item.path
    if path not in shares:
      shares[path] = bool(_MODULE_FIXTURE.search(path.read_text(encoding="utf-8")))
    if shares[path] and item.get_closest_marker("xdist_group") is None:
      item.add_marker(pytest.mark.xdist_group(path.stem))


@pytest.fixture
def compiled_programs(monkeypatch):
  """``(name, XLA options)`` of each program the search builds or looks up
  through :func:`search._src.trace_cache.compiled` during the test."""
  from search._src import trace_cache  # pylint: disable=g-import-not-at-top
  built = []
  compiled = trace_cache.compiled

  def record(name, jitted, static, key, args, options, on_traced=None):
    built.append((name, options))
    return compiled(name, jitted, static, key, args, options, on_traced)

  monkeypatch.setattr(trace_cache, "compiled", record)
  return built


@pytest.fixture
def x64():
  """Enables float64 for the test and restores the previous setting after."""
  with jax.enable_x64(True):
    yield


# ----- specs shared by several test files -----------------------------------


@pytest.fixture(scope="session", autouse=True)
def _jax_cache_in_tmp(tmp_path_factory):
  """One persistent compilation cache for the test run, in a temporary
  directory that the pytest-xdist workers share: a program one test compiled,
  in any worker or subprocess, loads in the next that builds it.

  Every program is kept, however fast it compiled (threshold 0 s): the suite
  runs the cost model eagerly in many processes (the workers, the notebook
  kernels, the command-line tests), and each compiles the same few thousand
  small programs (one per primitive and shape) that a later one then loads.
  The settings reach subprocesses through JAX's environment variables
  (``JAX_COMPILATION_CACHE_DIR``, ...) and the search's ``RLCOST_JAX_CACHE``.
  It changes compile time, never results."""
  base = tmp_path_factory.getbasetemp()
  path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "jax_cache"
  path.mkdir(exist_ok=True)
  mp = pytest.MonkeyPatch()
  mp.setenv("RLCOST_JAX_CACHE", str(path))
  settings = {"jax_compilation_cache_dir": str(path),
              "jax_persistent_cache_min_compile_time_secs": 0.0}
  saved = {k: getattr(jax.config, k) for k in settings}
  for k, v in settings.items():
    jax.config.update(k, v)
    mp.setenv(k.upper(), str(v))
  yield
  for k, v in saved.items():
    jax.config.update(k, v)
  mp.undo()


@pytest.fixture(scope="session")
def tiny_dense() -> ModelSpec:
  """A 4-layer GQA model with round numbers for hand-derived counts."""
  return ModelSpec("tiny-dense", n_layers=4, hidden=256, n_heads=8, n_kv_heads=2,
                   head_dim=32, ffn_hidden=1024, vocab=1000, gated_mlp=True)


@pytest.fixture(scope="session")
def tiny_moe() -> ModelSpec:
  """A 4-layer MoE model (first layer dense, 8 experts, top-2)."""
  return ModelSpec("tiny-moe", n_layers=4, hidden=256, n_heads=8, n_kv_heads=8,
                   head_dim=32, ffn_hidden=1024, vocab=1000, gated_mlp=True,
                   n_experts=8, top_k=2, expert_ffn_hidden=128, first_dense_layers=1)


@pytest.fixture(scope="session")
def h100() -> cm.Hardware:
  return cm.hardware.get("H100")


@pytest.fixture(scope="session")
def cluster_2x8(h100) -> cm.Cluster:
  """Two nodes of eight H100."""
  return cm.Cluster(h100, gpus_per_node=8, nodes=2)


@pytest.fixture(scope="session")
def grpo_job() -> cm.RLJob:
  """A small GRPO job on Qwen2.5-1.5B (fast to estimate)."""
  return cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                  samples_per_prompt=8.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


@pytest.fixture(scope="session")
def search_job() -> cm.RLJob:
  """The search tests' problem: GRPO on Qwen2.5-1.5B, 128 prompts x 8 samples
  (with ``cluster_2x8`` and ``compact_space``)."""
  return cm.RLJob("grpo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=128.0,
                  samples_per_prompt=8.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))


@pytest.fixture(scope="session")
def compact_space():
  """The search's compact space (few options per variable: fast to enumerate)."""
  import search  # pylint: disable=g-import-not-at-top (only the search tests need it)
  return search.SpaceOptions.compact()


@pytest.fixture(scope="session")
def split_search(search_job, cluster_2x8, compact_space):
  """The search of ``search_job`` on ``cluster_2x8`` in the ``split`` family
  (16 starts, 60 steps, seed 0, the compact space), run once per test run."""
  import search  # pylint: disable=g-import-not-at-top (only the search tests need it)
  return search.optimize(search_job, cluster_2x8, families=["split"], starts=16, steps=60,
                         seed=0, space=compact_space, relaxed="on")


@pytest.fixture(scope="session")
def ppo_job() -> cm.RLJob:
  """A small PPO job (actor, critic, reference) on Qwen2.5-1.5B."""
  return cm.RLJob("ppo", cm.models.get("qwen2.5-1.5b"), prompts_per_step=64.0,
                  samples_per_prompt=4.0, prompt_len=512.0,
                  response=cm.ResponseLength.from_mean_max(1000.0, 4096.0))
