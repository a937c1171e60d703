"""Traced programs kept on disk next to the persistent compilation cache.

The persistent compilation cache (:mod:`search._src.compile_cache`) serves a
compiled program to a later process, but that process must still trace the
cost model to find the program's key: for the relaxed loop (its gradient
graph, some 12,000 operations) that takes seconds of Python. This cache keeps
the traced and lowered program itself (``jax.export``, serialised StableHLO,
with the tree structure of its outputs), so a later process deserialises it,
and the compilation cache serves its compiled code.

A program is keyed by everything its trace depends on: its name and static
arguments, the tree structure and shapes of its arguments, the backend and
device kind, the JAX version and the source of the ``costmodel``, ``export``
(the settings a framework forces on a plan, ``Structure.runs_as``) and
``search`` packages (any edit makes a new key). It is used only where the
compilation cache is on and on one device (an exported program fixes its
device count).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import pickle
import tempfile
import threading

import jax
import numpy as np

from search._src import program_cache

# The compiled programs are kept in :mod:`search._src.program_cache` (kind
# ``traced``, keyed by the path on disk or ("memory", name, digest)).
# Tracing and lowering are Python and hold the interpreter lock, so programs
# traced in several threads at once (a search's families) all finish late;
# one at a time, the first starts compiling (which releases the lock) sooner.
_tracing = threading.Lock()


@functools.lru_cache(maxsize=1)
def _source_digest() -> str:
  """Digest of the packages whose code a traced program embodies."""
  import costmodel  # pylint: disable=g-import-not-at-top
  import export  # pylint: disable=g-import-not-at-top (a framework's forced settings)
  import search  # pylint: disable=g-import-not-at-top
  h = hashlib.sha256(f"jax {jax.__version__}".encode())
  for package in (costmodel, export, search):
    root = pathlib.Path(package.__file__).parent
    for path in sorted(root.rglob("*.py")):
      h.update(str(path.relative_to(root)).encode())
      h.update(path.read_bytes())
  return h.hexdigest()


def _leaf_spec(leaf) -> tuple:
  return (np.shape(leaf), str(jax.numpy.result_type(leaf)),
          isinstance(leaf, (int, float, bool)))


def _directory() -> str | None:
  path = jax.config.jax_compilation_cache_dir
  if not path or jax.device_count() != 1:
    return None
  return os.path.join(path, "traced")


def digest(name: str, key, args: tuple, compiler_options: dict) -> str:
  """The key of a traced program on disk (see :func:`call`): 40 hex digits."""
  leaves, treedef = jax.tree_util.tree_flatten(args)
  spec = repr((name, key, str(treedef), tuple(_leaf_spec(x) for x in leaves),
               sorted(compiler_options.items()), jax.default_backend(),
               jax.devices()[0].device_kind, _source_digest()))
  return hashlib.sha256(spec.encode()).hexdigest()[:40]


def call(name: str, jitted, static: tuple, key, args: tuple, compiler_options: dict,
         on_traced=None):
  """``jitted(*static, *args)`` through a program traced once per key and kept on disk.

  Args:
    name: The program's name (the file's prefix).
    jitted: A ``jax.jit`` function (its outputs a pytree of arrays).
    static: Its leading static arguments.
    key: A value with a stable ``repr`` naming ``static``.
    args: The other arguments (pytrees of arrays and numbers).
    compiler_options: The XLA options the program compiles with (over
      ``jitted``'s own, whether it was traced here or deserialised).
    on_traced: Called once the program is traced and lowered (or loaded), before
      it compiles, so other work of the caller's can start while XLA compiles;
      called at once when the program is compiled already in this process.

  Returns:
    ``jitted(*static, *args)`` (called as it is when this cache is not used).
  """
  return compiled(name, jitted, static, key, args, compiler_options, on_traced)(*args)


def compiled(name: str, jitted, static: tuple, key, args: tuple, compiler_options: dict,
             on_traced=None):
  """The program :func:`call` runs, as a function of arguments shaped as ``args``
  (for a program called many times: the key is computed once).

  Returns:
    ``f(*args) -> jitted(*static, *args)``, compiled unless neither a cache
    directory nor ``on_traced`` is given (then ``jitted`` itself, which compiles
    on its first call).
  """
  directory = _directory()
  leaves, treedef = jax.tree_util.tree_flatten(args)
  path = (os.path.join(directory, f"{name}-{digest(name, key, args, compiler_options)}.jaxexport")
          if directory is not None else None)
  if path is None and on_traced is None:
    return functools.partial(jitted, *static)
  if path is None:  # no cache on disk: traced, lowered and compiled ahead of time here
    path = ("memory", name, digest(name, key, args, compiler_options))
  return program_cache.get(
      "traced", path,
      lambda: _build(path, jitted, static, args, treedef, leaves, compiler_options, on_traced),
      on_hit=lambda: _notify(on_traced))


def _build(path, jitted, static, args, treedef, leaves, compiler_options, on_traced):
  """Traces (or loads) and compiles one program; ``on_traced`` before it compiles."""
  if isinstance(path, tuple):
    with _tracing:
      lowered = jitted.trace(*static, *args).lower()
    _notify(on_traced)
    program = lowered.compile(compiler_options)
  else:
    fn = functools.partial(jitted.__wrapped__, *static)
    with _tracing:
      exported, out_tree = _load_or_export(path, fn, treedef, leaves)
      lowered = jax.jit(exported.call, compiler_options=compiler_options).trace(
          *leaves).lower()
    _notify(on_traced)
    executable = lowered.compile()
    program = lambda *xs: jax.tree_util.tree_unflatten(
        out_tree, executable(*jax.tree_util.tree_leaves(xs)))
  return program


def _notify(callback) -> None:
  if callback is not None:
    callback()


def _load_or_export(path, fn, treedef, leaves):
  """The exported program at ``path`` and its outputs' tree structure; traced,
  exported and written there when it cannot be read."""
  try:
    blob, out_tree = pickle.loads(pathlib.Path(path).read_bytes())
    exported = jax.export.deserialize(bytearray(blob))
  except (OSError, ValueError, TypeError, EOFError, pickle.UnpicklingError):
    seen = {}

    def flat(*xs):
      out, seen["tree"] = jax.tree_util.tree_flatten(fn(*jax.tree_util.tree_unflatten(treedef,
                                                                                        xs)))
      return out

    exported = jax.export.export(jax.jit(flat))(*leaves)
    out_tree = seen["tree"]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False) as f:
      tmp = f.name
      f.write(pickle.dumps((exported.serialize(), out_tree)))
    os.replace(tmp, path)  # atomic: a concurrent reader sees all or nothing
  return exported, out_tree
