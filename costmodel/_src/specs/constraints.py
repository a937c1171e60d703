"""The rules that decide whether a plan exists, each written once.

A rule is a function of array-valued fields (degrees, pool sizes, model facts)
that returns a violation measure: exactly 0 where the rule holds and > 0 where
it does not. It works on numpy and on jax arrays alike (the ``xp`` argument is
the array module). Every rule has two measures from one definition, built from
a few primitives (``a`` divides ``b``, ``a <= b``, ``a`` is an integer):

* exact (``exact=True``): the size of the breach on concrete values, e.g.
  ``|b mod a| / a`` for divisibility;
* relaxed (``exact=False``): a smooth measure in log2 units for continuous
  degrees, e.g. ``relu(log2 a - log2 b)`` for divisibility (a relaxed degree
  only has to fit; integrality is restored by rounding).

Three readings come from the table :data:`RULES`:

* :func:`check_rules` raises a ``ValueError`` naming the field, the value and
  the rule (what :func:`costmodel.validate_plan` calls);
* :func:`rule_mask` (and :func:`rule_violations`, per rule) is a vectorised
  boolean reading over batches of values, for enumeration and rounding;
* :func:`rule_penalty` is the penalty of the relaxed search: the relaxed
  measure at ``tau > 0``, the exact one at ``tau = 0`` (positive iff violated).

Rules are grouped by *scope* (the fields they read): ``layout`` (a role's
training or inference layout on its pool), ``engine`` (the rollout engine on the
rollout pool), ``pool`` (one pool), ``pools`` (all pools on the cluster),
``mode`` (the execution mode alone: ``staleness``, ``partial``, and
``threshold``, the staleness threshold, NaN or absent when unset), ``placement``
(execution mode and weight sync against the placement: ``actor_on_rollout``,
``sync_ipc``, ``sync_reshard``, ``require_batches`` with 0 for none, ...) and
``schedule`` (execution mode against the job: ``require_batches``,
``mini_batches``). The core rules always apply; the optional sets in
:data:`RULE_SETS` apply when named.

The table itself, with its sources, is in :mod:`costmodel._src.specs.rule_table`.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import functools
from typing import Any

import numpy as np

from costmodel._src import pytree
from costmodel._src.ops import smooth
from costmodel._src.specs.model import ModelSpec
from costmodel._src.specs.rule_table import RULE_SETS
from costmodel._src.specs.rule_table import RULES
from costmodel._src.specs.rule_table import Fields
from costmodel._src.specs.rule_table import Rule


def rules(scope: str, rule_sets: Sequence[str] = (), only: Sequence[str] | None = None,
          ) -> tuple[Rule, ...]:
  """The rules of ``scope``: the core ones and those of the named optional sets.

  Args:
    scope: One of the scopes (see the module docstring).
    rule_sets: Optional sets to add (names in :data:`RULE_SETS`).
    only: When given, just the rules of these names.

  Raises:
    ValueError: for an unknown scope, rule set or rule name.
  """
  return _rules(scope, tuple(rule_sets), None if only is None else tuple(only))


@functools.lru_cache(maxsize=256)
def _rules(scope: str, rule_sets: tuple[str, ...], only: tuple[str, ...] | None
           ) -> tuple[Rule, ...]:
  pytree.check_one_of("", sorted({r.scope for r in RULES}), scope=scope)
  for s in rule_sets:
    if s not in RULE_SETS:
      raise ValueError(f"rule_sets: {s!r} is not one of {RULE_SETS}")
  names = {r.name for r in RULES}
  for n in only or ():
    if n not in names:
      raise ValueError(f"only: rule {n!r} is not one of {sorted(names)}")
  return tuple(r for r in RULES if r.scope == scope and (r.rule_set == "core" or r.rule_set
                                                          in rule_sets)
               and (only is None or r.name in only))


def rule_violations(scope: str, fields: Fields, rule_sets: Sequence[str] = (), xp=np,
                    exact: bool = True, only: Sequence[str] | None = None) -> dict[str, Any]:
  """Each rule's violation measure (0 where it holds) over array fields."""
  return {r.name: r.measure(fields, xp, exact) for r in rules(scope, rule_sets, only)}


def rule_mask(scope: str, fields: Fields, rule_sets: Sequence[str] = (), xp=np,
              only: Sequence[str] | None = None):
  """True where every rule of ``scope`` holds (exact measures all 0)."""
  ok = True
  for m in rule_violations(scope, fields, rule_sets, xp, True, only).values():
    ok = ok & (m <= 0)
  return xp.asarray(ok)


def rule_penalty(scope: str, fields: Fields, tau, rule_sets: Sequence[str] = (), xp=np,
                 only: Sequence[str] | None = None):
  """Sum of the violation measures: relaxed at ``tau > 0``, exact at ``tau = 0``.

  Finite with finite gradients at any ``tau`` (jax: ``xp=jax.numpy``).
  """
  total = 0.0
  on = smooth.known_positive(tau)  # a known tau: only its measure is computed
  for r in rules(scope, rule_sets, only):
    if on is None:
      measure = xp.where(xp.asarray(tau) > 0, r.measure(fields, xp, False),
                         r.measure(fields, xp, True))
    else:
      measure = r.measure(fields, xp, not on)
    total = total + measure
  return total


def check_rules(scope: str, fields: Fields, where: str = "",
                rule_sets: Sequence[str] = (), labels: Mapping[str, str] | None = None) -> None:
  """Raises for the first rule of ``scope`` that concrete scalar ``fields`` break.

  Args:
    scope: The scope of the fields.
    fields: Python or numpy scalars.
    where: Prefix of the message (e.g. ``"Plan: actor train layout: "``).
    rule_sets: Optional sets to add.
    labels: Names the messages may quote (e.g. ``rollout_pool``).

  Raises:
    ValueError: ``where`` + the rule's message (field, value, rule).
  """
  f = {k: float(v) for k, v in fields.items()}
  for r in rules(scope, rule_sets):
    if r.measure(f, np, True) > 0:
      raise ValueError(where + r.message({**f, **(labels or {})}))


def model_fields(model: ModelSpec) -> dict[str, float]:
  """The model facts the layout and engine rules read."""
  return {"n_heads": float(model.n_heads), "n_kv_heads": float(model.n_kv_heads),
          "n_layers": float(model.n_layers), "n_experts": float(model.n_experts),
          "moe": float(model.is_moe), "mla": float(model.is_mla),
          "mamba_groups": float(model.mamba_groups)}


def layout_fields(model: ModelSpec, gpus, tp, pp, cp, ep, *, zero=0.0, micro_batch=1.0,
                  samples=0.0, mini_batch_samples=0.0, trained=False, etp=1.0, vpp=1.0
                  ) -> dict[str, Any]:
  """The fields of the ``layout`` scope (arrays broadcast together).

  Args:
    model: The role's architecture.
    gpus: GPUs of the role's pool.
    tp: Tensor-parallel degree.
    pp: Pipeline-parallel degree.
    cp: Context-parallel degree.
    ep: Expert-parallel degree.
    zero: ZeRO stage.
    micro_batch: Sequences per micro-batch per GPU.
    samples: Samples per step (framework batch rules).
    mini_batch_samples: Samples per optimizer update (framework batch rules).
    trained: Whether the layout is a training layout (framework batch rules
      apply only then).
    etp: Expert-tensor parallel degree (the model assumes 1).
    vpp: Interleaved pipeline chunks per GPU (1: plain 1F1B).
  """
  return {**model_fields(model), "gpus": gpus, "tp": tp, "pp": pp, "cp": cp, "ep": ep,
          "etp": etp, "vpp": vpp, "zero": zero, "micro_batch": micro_batch, "samples": samples,
          "mini_batch_samples": mini_batch_samples, "trained": float(trained)}


def engine_fields(model: ModelSpec, gpus, tp, pp, ep, dp_attention=0.0) -> dict[str, Any]:
  """The fields of the ``engine`` scope: the actor's model on the rollout pool
  (``dp_attention``: ``Engine.dp_attention``, whole attention heads on each GPU)."""
  return {**model_fields(model), "gpus": gpus, "tp": tp, "pp": pp, "ep": ep,
          "dp_attention": dp_attention}
