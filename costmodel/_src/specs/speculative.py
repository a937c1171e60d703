"""Speculative decoding in the rollout engine: the spec (``Engine.speculative``).

A draft proposes ``draft_tokens`` (k) tokens per sequence; the target model
verifies them in one forward pass over k + 1 tokens per sequence and keeps the
longest accepted prefix plus one token of its own. With each draft token
accepted with probability ``acceptance`` (alpha) given its predecessors were,
a step yields (Leviathan et al. 2023, arXiv:2211.17192, eq. 1)

    E[tokens per step] = (1 - alpha^(k + 1)) / (1 - alpha),

the mean acceptance length vLLM and SGLang report (k + 1 at alpha = 1).

Draft kinds:

* ``mtp``: the model's own multi-token-prediction layers (DeepSeek-V3,
  GLM-4.5, Qwen3.5: ``ModelSpec.mtp_layers`` >= 1);
* ``eagle``: an EAGLE-style head trained for the model: like ``mtp``, one
  decoder layer of the target's width that shares its embedding and LM head;
* ``draft``: a separate smaller model (``draft_model``), with its own weights
  and KV cache;
* ``ngram``: prompt-lookup drafting on the CPU: no draft model on the GPU.

The continuous quantities (``draft_tokens``, ``acceptance``) are pytree
leaves, so a search can vary them and gradients reach them; the kind and the
draft model are structure.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from costmodel._src import pytree
from costmodel._src.specs.model import ModelSpec

KINDS = ("mtp", "eagle", "draft", "ngram")


@pytree.pytree_dataclass
class Speculative:
  """Speculative decoding settings of an engine.

  Attributes:
    kind: Draft kind, one of :data:`KINDS` (static).
    draft_tokens: Tokens drafted per sequence per step (k >= 1).
    acceptance: Probability that a draft token is accepted given its
      predecessors were, in (0, 1).
    draft_model: The draft of kind ``draft`` (static; None otherwise).
  """

  kind: str = pytree.static_field()
  draft_tokens: float = 1.0
  acceptance: float = 0.7
  draft_model: ModelSpec | None = pytree.static_field(default=None)

  def __post_init__(self):
    owner = "Speculative"
    pytree.check_one_of(owner, KINDS, kind=self.kind)
    pytree.check_at_least(owner, 1.0, draft_tokens=self.draft_tokens)
    pytree.check_fraction(owner, acceptance=self.acceptance)
    if pytree.is_concrete(self.acceptance) and float(jnp.max(jnp.asarray(
        self.acceptance))) >= 1.0:
      raise ValueError(f"{owner}: acceptance={self.acceptance!r} must lie in (0, 1)")
    pytree.check_instance(owner, ModelSpec, optional=True, draft_model=self.draft_model)
    if (self.kind == "draft") != (self.draft_model is not None):
      raise ValueError(f"{owner}: kind={self.kind!r} with draft_model="
                       f"{getattr(self.draft_model, 'name', None)!r}: a draft model goes with "
                       "kind 'draft' and only with it")

  @classmethod
  def from_acceptance_length(cls, kind: str, draft_tokens: int, acceptance_length: float,
                             draft_model: ModelSpec | None = None) -> Speculative:
    """The per-token acceptance that yields a reported mean acceptance length.

    Solves ``(1 - a^(k+1)) / (1 - a) = acceptance_length`` by bisection.

    Raises:
      ValueError: unless ``1 < acceptance_length < k + 1``.
    """
    k = draft_tokens
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
      raise ValueError(f"Speculative: draft_tokens={k!r} must be an integer >= 1")
    if not 1.0 < acceptance_length < k + 1.0:
      raise ValueError(f"Speculative: acceptance_length={acceptance_length!r} must lie in "
                       f"(1, draft_tokens + 1 = {k + 1})")
    lo, hi = 1e-9, 1.0 - 1e-9
    for _ in range(100):
      mid = 0.5 * (lo + hi)
      if (1.0 - mid ** (k + 1)) / (1.0 - mid) < acceptance_length:
        lo = mid
      else:
        hi = mid
    return cls(kind=kind, draft_tokens=float(k), acceptance=0.5 * (lo + hi),
               draft_model=draft_model)

  def tokens_per_step(self):
    """Mean tokens a sequence advances per verify step (the acceptance length)."""
    a = jnp.asarray(self.acceptance, float)
    return (1.0 - a ** (jnp.asarray(self.draft_tokens, float) + 1.0)) / (1.0 - a)

  def check_model(self, model: ModelSpec) -> None:
    """Refuses a draft the target cannot run (``mtp`` without MTP layers)."""
    if self.kind == "mtp" and model.mtp_layers < 1:
      raise ValueError(f"Speculative: kind='mtp' needs a model with MTP layers; "
                       f"{model.name!r} has mtp_layers=0 (use kind 'eagle' or 'draft')")

  def replace(self, **changes) -> Speculative:
    return dataclasses.replace(self, **changes)
