"""Rows grouped by equal keys, and a function run once per group.

:func:`distinct` finds the distinct rows of a batch of integer keys through a
hash table (no sort); :func:`blocks` runs a jitted function on a list of row
indices block by block in one loop and reads the results back per row;
:func:`bits` turns any array into the key words it is grouped by. Nothing here
knows the cost model: :mod:`costmodel._src.rows.estimate` groups a batch's
stage inputs with it.
"""

from __future__ import annotations

import functools

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

# Odd multipliers of the key hash, one per key word (cycled).
_MULTIPLIERS = (np.random.default_rng(0x5EED).integers(0, 2**31, size=64, dtype=np.uint32)
                * np.uint32(2) + np.uint32(1))
# The hash's finishing multipliers, one per round of :func:`distinct`.
_MIXES = (0x7FEB352D, 0x846CA68B)


def bits(x) -> jax.Array:
  """The bits of ``x`` as uint32 words (raveled)."""
  x = jnp.asarray(x)
  if x.dtype == jnp.bool_ or x.dtype.itemsize < 4:
    x = x.astype(jnp.int32 if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_
                 else jnp.float32)
  return jnp.ravel(lax.bitcast_convert_type(x, jnp.uint32))


def distinct(keys: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The distinct rows of ``keys`` [N, L] (uint32).

  Each row's hash picks a slot of a table of at least ``2 N`` entries; the
  lowest row index that lands in a slot is its representative, and a row takes
  its slot's representative only if their keys are equal in full. Rows that
  do not (another key took the slot) try again with a second hash, then stand
  for themselves. No sort: on 16,384 rows of 12 words hashing
  takes about a third of the time of sorting the hashes, with fewer keys listed
  twice; a table of ``2 N`` rather than ``4 N`` slots has less to fill.

  Returns:
    ``(firsts, inverse, count)``: ``firsts[:count]`` a row index of each distinct
    key (the rest 0), ``inverse`` [N] the position in ``firsts`` of each row's
    key, ``count`` how many there are (at least 1 when N > 0). A key may be
    listed twice when hashes collide; never two keys as one.
  """
  n, words = keys.shape
  if n == 0:
    empty = jnp.zeros((0,), jnp.int32)
    return empty, empty, jnp.zeros((), jnp.int32)
  mult = jnp.asarray(np.resize(_MULTIPLIERS, words))
  h = jnp.sum(keys * mult, axis=1, dtype=jnp.uint32)
  slots = 1 << (2 * n - 1).bit_length()
  index = jnp.arange(n, dtype=jnp.int32)

  def round_(mix, h, first, pending):
    h = (h ^ (h >> 16)) * jnp.uint32(mix)
    h = h ^ (h >> 15)
    slot = (h & jnp.uint32(slots - 1)).astype(jnp.int32)
    table = jnp.full((slots,), n, jnp.int32).at[jnp.where(pending, slot, slots)].min(
        index, mode="drop")
    rep = jnp.minimum(table[slot], n - 1)  # a pending row's slot holds it or a lower row
    same = pending & jnp.all(keys[rep] == keys, axis=1)
    return h, jnp.where(same, rep, first), pending & ~same

  state = round_(_MIXES[0], h, index, jnp.ones((n,), bool))
  for mix in _MIXES[1:]:  # only where a row is still pending (a collision)
    state = lax.cond(jnp.any(state[2]), functools.partial(round_, mix), lambda *s: s, *state)
  first = state[1]
  new = first == index
  run = jnp.cumsum(new, dtype=jnp.int32) - 1
  firsts = jnp.zeros((n,), jnp.int32).at[jnp.where(new, run, n)].set(index, mode="drop")
  return firsts, run[first], run[-1] + 1


def blocks(fn, index, count, block, inverse):
  """``fn(index[i:i + block])`` over the first ``count`` entries of ``index``
  (a multiple of ``block`` long), block by block, the results read back at
  ``inverse``. ``fn`` is jitted, so its trace gives the buffers' shapes and
  serves the loop."""
  shapes = jax.eval_shape(fn, index[:block])

  def body(i, out):
    at = i * block
    part = fn(lax.dynamic_slice_in_dim(index, at, block))
    return jax.tree.map(lambda o, p: lax.dynamic_update_slice_in_dim(o, p, at, 0), out, part)

  out = jax.tree.map(lambda s: jnp.zeros((index.shape[0], *s.shape[1:]), s.dtype), shapes)
  out = lax.fori_loop(0, (count + block - 1) // block, body, out)
  return jax.tree.map(lambda o: o[inverse], out)
