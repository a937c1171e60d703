"""Speculative decoding as a search option: turned on only where it pays.

Given a draft (:class:`costmodel.Speculative`: kind, draft tokens, acceptance
rate), each plan a search returns is estimated again with the draft in its
rollout engines, and the draft is kept for a plan only when its step is
shorter and still fits (the draft's weights and KV cache take engine memory;
past the ridge batch the verify pass costs more than it saves). The plans are
then ranked again.

Only frameworks whose pinned code passes a speculative configuration to its
engine take the option (:data:`RUNS`), each with the keys it reads
(:func:`framework_keys`, ``export.speculative_keys``: NeMo-RL's
``policy.generation.vllm_kwargs.speculative_config``, slime's
``--sglang-speculative-*`` flags, each with the framework line that reads it).
"""

from __future__ import annotations

import dataclasses

import numpy as np

import costmodel as cm
import export

RUNS = ("any", *export.SPECULATIVE_RUNS)
framework_keys = export.speculative_keys


def check(framework: str, job: cm.RLJob, spec: cm.Speculative | None) -> None:
  """Refuses a draft the framework or the model cannot run."""
  if spec is None:
    return
  if not isinstance(spec, cm.Speculative):
    raise ValueError(f"speculative={spec!r} must be a costmodel.Speculative or None")
  if framework not in RUNS:
    framework_keys(framework, spec)  # raises, naming the frameworks that run it
  spec.check_model(job.actor)


def apply(result, job: cm.RLJob, cluster: cm.Cluster, spec: cm.Speculative | None,
          efficiency: cm.Efficiency | None = None):
  """``result`` with the draft turned on in each top plan where it shortens the step."""
  if spec is None or result.best_plan is None:
    return result
  entries = []
  for (plan, est), fam in zip(result.top, result.top_families, strict=True):
    with_draft = plan.replace(engine=plan.engine.replace(speculative=spec))
    est_d = cm.estimate(job, with_draft, cluster, efficiency)
    if bool(est_d.feasible) and float(est_d.step_time_s) < float(est.step_time_s):
      entries.append((with_draft, est_d, fam))
    else:
      entries.append((plan, est, fam))
  entries.sort(key=lambda e: float(e[1].step_time_s))
  top = tuple((p, e) for p, e, _ in entries)
  best_by = dict(result.best_by_family_s)
  for _, e, fam in entries:
    best_by[fam] = min(best_by.get(fam, np.inf), float(e.step_time_s))
  return dataclasses.replace(result, best_plan=top[0][0], best_estimate=top[0][1],
                             family=entries[0][2], top=top,
                             top_families=tuple(f for _, _, f in entries),
                             best_by_family_s=best_by)


def parse(text: str, job: cm.RLJob) -> cm.Speculative:
  """``KIND:TOKENS:ACCEPTANCE[:DRAFT_MODEL]`` (``--speculative``) as a Speculative.

  ``eagle:3:0.7`` drafts 3 tokens with an EAGLE head accepted at 0.7 each;
  ``draft:4:0.6:qwen2.5-0.5b`` drafts with that model (a preset or a Hugging
  Face id).

  Raises:
    ValueError: naming the part that is malformed.
  """
  parts = text.split(":")
  if len(parts) not in (3, 4):
    raise ValueError(f"--speculative={text!r} must be KIND:TOKENS:ACCEPTANCE[:DRAFT_MODEL], "
                     "e.g. mtp:3:0.7")
  kind, tokens, acceptance = parts[:3]
  try:
    k, a = float(tokens), float(acceptance)
  except ValueError:
    raise ValueError(f"--speculative={text!r}: TOKENS={tokens!r} and ACCEPTANCE={acceptance!r} "
                     "must be numbers") from None
  draft = cm.models.get(parts[3]) if len(parts) == 4 else None
  spec = cm.Speculative(kind=kind, draft_tokens=k, acceptance=a, draft_model=draft)
  spec.check_model(job.actor)
  return spec
