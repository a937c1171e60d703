"""Which elements of its argument each output of a traced function reads.

:func:`element_dependence` reads the jaxpr of ``fn(x)`` and follows every
element of ``x`` through the operations that only move elements (slices,
gathers at constant indices, reshapes, concatenations, broadcasts), into
nested jitted and custom-derivative calls. Any other operation makes each of
its outputs depend on everything its inputs depend on, and control flow
(``cond``, ``while``, ``scan``) too. So the answer can only list too much: an
output never depends on an element it does not list, and two arguments equal
on the listed elements give equal outputs (for the same closed-over values).
"""

from __future__ import annotations

import jax
from jax.extend import core
import numpy as np

# Primitives that only move or copy elements: an output element is one input
# element (or a constant). Evaluated on element positions to follow them.
_MOVES = frozenset({"slice", "squeeze", "reshape", "broadcast_in_dim", "transpose",
                    "expand_dims", "rev", "concatenate", "gather", "dynamic_slice"})
# Element-wise primitives of one array that keep each element's dependence.
_SAME = frozenset({"convert_element_type", "bitcast_convert_type", "copy", "copy_p",
                   "reduce_precision", "neg", "abs", "floor", "ceil", "round", "sign"})
# Moving primitives whose operands after the first are positions, not data:
# constants that do not depend on the argument.
_ONE_DATA_OPERAND = frozenset({"gather", "dynamic_slice"})
# Largest array followed element by element; larger ones are followed as a whole.
_MAX_ELEMENTS = 1 << 14
_NONE = frozenset()


def element_dependence(fn, x: jax.ShapeDtypeStruct) -> list[frozenset[int]]:
  """For each output leaf of ``fn(x)`` (in ``jax.tree.leaves`` order), the
  positions of the elements of ``x`` (raveled) it may depend on: a superset.

  Args:
    fn: A traceable function of one array.
    x: The argument's shape and dtype.
  """
  closed = jax.make_jaxpr(fn)(x)
  size = int(np.prod(x.shape, dtype=int))
  arg = np.empty(x.shape, object)
  arg.reshape(-1)[:] = [frozenset((i,)) for i in range(size)]
  outs = _run(closed.jaxpr, [_NONE] * len(closed.consts), closed.consts, [arg])
  return [_union(d) for d in outs]


def _union(d) -> frozenset:
  if isinstance(d, frozenset):
    return d
  return frozenset().union(*d.reshape(-1)) if d.size else _NONE


def _elements(d, shape):
  """``d`` as an object array of ``shape`` (one set per element)."""
  if not isinstance(d, frozenset):
    return d
  out = np.empty(shape, object)
  out.reshape(-1)[:] = [d] * out.size
  return out


def _concrete(v, values):
  """The value of jaxpr variable or literal ``v`` where known (else None)."""
  if isinstance(v, core.Literal):
    return np.asarray(v.val)
  value = values.get(v)
  if value is None or isinstance(value, jax.core.Tracer):
    return None
  try:
    return np.asarray(value)
  except (TypeError, jax.errors.ConcretizationTypeError):
    return None


def _run(jaxpr, const_deps, const_values, arg_deps) -> list:
  """Dependence of ``jaxpr``'s outputs given its constants' and arguments'."""
  deps, values = {}, {}
  for v, d, value in zip(jaxpr.constvars, const_deps, const_values, strict=True):
    deps[v], values[v] = d, value
  for v, d in zip(jaxpr.invars, arg_deps, strict=True):
    deps[v] = d
  read = lambda v: _NONE if isinstance(v, core.Literal) else deps[v]
  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    outs = _equation(eqn, ins, values)
    for v, d in zip(eqn.outvars, outs, strict=True):
      deps[v] = d
    _fold(eqn, values)
  return [read(v) for v in jaxpr.outvars]


def _fold(eqn, values):
  """Records the outputs of ``eqn`` where its inputs are known constants (the
  positions a gather reads are often computed from constants)."""
  if (len(eqn.outvars) != 1 or _inner(eqn) is not None or eqn.effects
      or any(int(np.prod(v.aval.shape, dtype=int)) > _MAX_ELEMENTS
             for v in (*eqn.invars, *eqn.outvars))):
    return
  args = [_concrete(v, values) for v in eqn.invars]
  if any(a is None for a in args):
    return
  try:
    with jax.ensure_compile_time_eval():
      values[eqn.outvars[0]] = np.asarray(eqn.primitive.bind(*args, **eqn.params))
  except Exception:  # pylint: disable=broad-except
    pass  # not folded: a later gather at these positions is followed as a whole


def _equation(eqn, ins, values) -> list:
  name = eqn.primitive.name
  out_avals = [v.aval for v in eqn.outvars]
  if name in _SAME and len(ins) == 1 and out_avals[0].shape == eqn.invars[0].aval.shape:
    return ins
  if name in _MOVES and len(out_avals) == 1:
    moved = _moved(eqn, ins, values)
    if moved is not None:
      return [moved]
  inner = _inner(eqn)
  if inner is not None:
    jaxpr, consts = inner
    return _run(jaxpr, [_NONE] * len(consts), consts, ins)
  u = frozenset().union(*(_union(d) for d in ins))
  return [u] * len(out_avals)


def _inner(eqn):
  """``(jaxpr, consts)`` of a call whose outputs are its jaxpr's (jit, custom
  derivatives), or None."""
  for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
    j = eqn.params.get(key)
    if isinstance(j, core.ClosedJaxpr) and len(j.jaxpr.invars) == len(eqn.invars):
      return j.jaxpr, j.consts
    if isinstance(j, core.Jaxpr) and not j.constvars and len(j.invars) == len(eqn.invars):
      return j, []
  return None


def _moved(eqn, ins, values):
  """The output's per-element dependence of a moving primitive, or None where
  it cannot be followed (positions not constant, arrays too large)."""
  name = eqn.primitive.name
  n_data = 1 if name in _ONE_DATA_OPERAND else len(ins)
  args, flat, offset = [], [], 0
  for k, v in enumerate(eqn.invars):
    if k < n_data:
      shape = v.aval.shape
      n = int(np.prod(shape, dtype=int))
      if n > _MAX_ELEMENTS:
        return None
      flat.append(_elements(ins[k], shape).reshape(-1))
      args.append(np.arange(offset, offset + n, dtype=np.int32).reshape(shape))
      offset += n
    else:
      if _union(ins[k]):
        return None  # a position that depends on the argument
      value = _concrete(v, values)
      if value is None:
        return None
      args.append(value)
  if int(np.prod(eqn.outvars[0].aval.shape, dtype=int)) > _MAX_ELEMENTS:
    return None
  with jax.ensure_compile_time_eval():
    at = np.asarray(eqn.primitive.bind(*args, **_int_params(name, eqn.params)))
  table = np.concatenate(flat) if flat else np.empty((0,), object)
  inside = (at >= 0) & (at < offset)  # a gather's fill reads no element
  out = np.empty(at.shape, object)
  out.reshape(-1)[:] = [_NONE] * out.size
  out[inside] = table[at[inside]]
  return out


def _int_params(name, params):
  """``params`` for evaluating ``name`` on int32 positions."""
  if name == "gather" and params.get("fill_value") is not None:
    return dict(params, fill_value=-1)
  return params

