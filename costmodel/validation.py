"""Published measurements as prediction cases, and the accuracy report.

>>> from costmodel import validation
>>> rows = validation.evaluate(validation.cases(["training"]))
>>> validation.summary(rows)["training"]["median"] < 0.1
True
"""

from __future__ import annotations

from collections.abc import Sequence

from costmodel._src.fit.calibrate import SourceRow
from costmodel._src.fit.calibrate import SourceValidation
from costmodel._src.fit.calibrate import split_cases
from costmodel._src.fit.calibrate import validate_by_source
from costmodel._src.fit.measurements import published_table
from costmodel._src.fit.nemo_rl_log import nemo_rl_log_cases
from costmodel._src.fit.validation.cases import SKIPPED
from costmodel._src.fit.validation.cases import Case
from costmodel._src.fit.validation.log_cases import verl_log_cases
from costmodel._src.fit.validation.report import Row
from costmodel._src.fit.validation.report import evaluate
from costmodel._src.fit.validation.report import markdown
from costmodel._src.fit.validation.report import summary
from costmodel._src.fit.validation.rl_cases import SKIPPED_RL
from costmodel._src.fit.validation.rl_cases import inferred_means
from costmodel._src.fit.validation.rl_cases import runs as rl_runs
from costmodel._src.fit.validation.sources import STAGE_KINDS
from costmodel._src.fit.validation.sources import source_of
from costmodel._src.fit.validation.sources import stage_kind
from costmodel._src.fit.validation.sync_cases import SKIPPED_MORE

GROUPS = ("training", "memory", "kernel", "decode", "collective", "moe", "fp8", "rl_step",
          "rl_stage", "rl_sync", "feasibility", "rl_lora", "lora_max_batch", "rl_multi_turn",
          "rl_rest")


def cases(groups: Sequence[str] | None = None) -> list[Case]:
  """Every prediction case, or those of ``groups``.

  Raises:
    ValueError: for an unknown group (the message lists the known ones).
  """
  from costmodel._src.fit.validation import cases as base  # pylint: disable=g-import-not-at-top
  from costmodel._src.fit.validation import rl_cases  # pylint: disable=g-import-not-at-top
  from costmodel._src.fit.validation import sync_cases  # pylint: disable=g-import-not-at-top
  groups = tuple(groups) if groups is not None else GROUPS
  for g in groups:
    if g not in GROUPS:
      raise ValueError(f"group={g!r} is not one of {GROUPS}")
  from costmodel._src.fit.validation import moe_cases  # pylint: disable=g-import-not-at-top
  out = [c for c in base.all_cases() + sync_cases.all_more_cases() + moe_cases.all_cases()
         if c.group in groups]
  if {"rl_step", "rl_stage"} & set(groups):
    out += [c for c in rl_cases.all_rl_cases() if c.group in groups]
  if {"rl_lora", "lora_max_batch"} & set(groups):
    from costmodel._src.fit.validation import lora_cases  # pylint: disable=g-import-not-at-top
    out += [c for c in lora_cases.cases() if c.group in groups]
  if "rl_rest" in groups:
    from costmodel._src.fit.validation import rest_cases  # pylint: disable=g-import-not-at-top
    out += rest_cases.cases()
  if "rl_multi_turn" in groups:
    from costmodel._src.fit.validation import agentic_cases  # pylint: disable=g-import-not-at-top
    out += agentic_cases.cases()
  return out


__all__ = ("Case", "GROUPS", "Row", "SKIPPED", "SKIPPED_MORE", "SKIPPED_RL", "STAGE_KINDS",
           "SourceRow", "SourceValidation", "cases", "evaluate", "inferred_means", "markdown",
           "nemo_rl_log_cases", "published_table", "rl_runs", "source_of", "split_cases",
           "stage_kind", "summary", "validate_by_source", "verl_log_cases")
