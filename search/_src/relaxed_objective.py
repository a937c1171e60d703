"""A family space's relaxed objective and what its relaxed programs specialise on.

The objective of one start is ``log(step_time) + w * penalty``, the penalty
being the memory excess plus the rule table's layout violation
(:func:`penalty_of`, :func:`loss_of`); the gradient moves the columns
:func:`trainable` lists; compiled relaxed programs are keyed on
:func:`static_key`. The relaxed loop (:mod:`search._src.relax`) and the shared
space of several families (:mod:`search._src.shared`) read them.
"""

from __future__ import annotations

import jax.numpy as jnp

from search._src import space as space_lib


def penalty_of(structure, v, est, job, cluster):
  """The constraint penalty of relaxed values ``v`` and their estimate: memory
  excess plus the rule table's layout violation."""
  return (space_lib.memory_excess(structure, v, est, job, cluster)
          + space_lib.layout_violation(structure, v, job, cluster.n_gpus))


def loss_of(step, penalty, weight):
  """The relaxed objective: log step time plus the weighted penalty."""
  return jnp.log(jnp.maximum(step, 1e-9)) + weight * penalty


def trainable(fs) -> tuple[int, ...]:
  """Columns the gradient moves: not categorical, more than one option (the
  pool of a one-pool placement holds the whole cluster); the others stay where
  they start."""
  return tuple(i for i, v in enumerate(fs.vars)
               if v.kind != space_lib.CAT and len(v.options) > 1)


def static_key(fs) -> tuple:
  """What the relaxed programs of a space specialise on: its structure and each
  variable's kind, whether it has a choice (:func:`trainable`) and, for a
  fraction, its end options (its sigmoid's range). Nothing of the cluster: its
  GPUs and the pools' options are data (the programs of one family serve every
  cluster size)."""
  return (fs.structure, tuple(
      (v.kind, len(v.options) > 1,
       (float(v.options[0]), float(v.options[-1])) if v.kind == space_lib.FRAC else ())
      for v in fs.vars))
