"""Cost of speculative decoding in a rollout engine (``Engine.speculative``).

One step of every running sequence:

* draft: ``k`` sequential forward passes of the draft over the batch (one
  token per sequence each): for ``mtp`` and ``eagle`` one decoder layer of the
  target plus its LM head (:func:`draft_spec`), for ``draft`` the draft model,
  for ``ngram`` nothing on the GPU;
* verify: one forward pass of the target over ``k + 1`` tokens per sequence:
  the same weight and KV reads as a plain decode step, ``k + 1`` times the
  GEMM and attention FLOPs (and, for an MoE, the experts that many more
  tokens touch).

The step advances each sequence by ``E = tokens_per_step`` tokens, so a
token costs ``(verify + draft) / E``; the engine's per-step overhead is paid
once per ``E`` tokens, its per-sequence overhead (sampling) once per position
sampled, ``k + 1`` per step
(:func:`costmodel._src.stages.generate.step_overhead_s`). While decode is
memory bound (small batch) the verify pass costs about a plain step and the
gain approaches ``E`` less the draft's share; past the ridge batch the verify
pass costs ``k + 1`` plain steps' FLOPs, the per-sequence overhead grows by
``(k + 1) / E`` and the gain falls below 1: speculation pays only at small
batch, as the long tail of a rollout is.

Memory: the draft's weights (one layer for ``mtp``/``eagle``, the whole draft
model for ``draft``) and its KV cache per token.

The EAGLE head's input projection (``2h x h``) and MTP's extra norms are left
out of :func:`draft_spec` (under 5% of its parameters).
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel._src.ops import smooth
from costmodel._src.specs.layout import Engine
from costmodel._src.specs.model import ModelSpec
from costmodel._src.specs.speculative import Speculative


def draft_spec(model: ModelSpec, spec: Speculative) -> ModelSpec | None:
  """The model that drafts one token: a one-layer copy of the target, the draft model or None."""
  if spec.kind == "draft":
    return spec.draft_model
  if spec.kind == "ngram":
    return None
  moe = model.is_moe and model.n_moe_layers > 0
  # One attention + MLP layer (Nemotron 3's MTP module: an attention and an MoE block).
  return model.replace(
      name=f"{model.name}-{spec.kind}", n_layers=1, layer_types=(), mixer_only_layers=0,
      first_dense_layers=0 if moe else (1 if model.is_moe else 0), mtp_layers=0)


def draft_weight_params(model: ModelSpec, spec: Speculative) -> float:
  """Parameters the draft adds to the engine (the MTP/EAGLE layer shares embeddings and head)."""
  d = draft_spec(model, spec)
  if d is None:
    return 0.0
  if spec.kind == "draft":
    return float(d.total_params)
  return float(d.layer_params(False))


def draft_weight_bytes_per_gpu(model: ModelSpec, engine: Engine, param_bytes: float):
  """Draft weight bytes on one engine GPU (split over the engine's TP)."""
  spec = engine.speculative
  if spec is None:
    return jnp.zeros(())
  return draft_weight_params(model, spec) * param_bytes / engine.tp


def draft_kv_bytes_per_token_per_gpu(model: ModelSpec, engine: Engine, kv_bytes: float):
  """Draft KV bytes one engine GPU holds per token of a sequence."""
  spec = engine.speculative
  d = None if spec is None else draft_spec(model, spec)
  if d is None:
    return jnp.zeros(())
  kv_tp = 1.0 if d.is_mla else smooth.smin(engine.tp, float(d.n_kv_heads))
  return d.kv_bytes_per_token(kv_bytes) / kv_tp


def decode_round(round_fn, model: ModelSpec, job, engine: Engine, cluster, eff, batch, ctx,
                 tau=0.0):
  """(compute, memory, comm) seconds per token-advance of every sequence, and tokens per step.

  ``round_fn`` is the engine's plain decode round
  (:func:`costmodel._src.stages.generate.decode_round`), called with
  ``tokens_per_seq``. Without speculation: the plain round and 1 token.
  """
  spec = engine.speculative
  if spec is None:
    return round_fn(model, job, engine, cluster, eff, batch, ctx, tau), jnp.ones(())
  spec.check_model(model)
  k = jnp.asarray(spec.draft_tokens, float)
  verify = round_fn(model, job, engine, cluster, eff, batch, ctx, tau, tokens_per_seq=k + 1.0)
  d = draft_spec(model, spec)
  if d is None:
    draft = (0.0, 0.0, 0.0)
  else:
    one = round_fn(d, job, engine.replace(speculative=None), cluster, eff, batch, ctx, tau)
    draft = tuple(k * x for x in one)
  e = spec.tokens_per_step()
  return tuple((v + dr) / e for v, dr in zip(verify, draft)), e
