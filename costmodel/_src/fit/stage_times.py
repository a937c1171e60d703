"""Stage times of RL steps (`StageTimes`) and their steady-state medians
(`steady_state`)."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import math
import types

import numpy as np

from costmodel._src.step import algorithms

STAGE_NAMES: tuple[str, ...] = tuple(algorithms.VERL_LOG_STAGES)
"""Canonical stage keys of `StageTimes.times_s`, in pipeline order (veRL's own
names; `costmodel._src.step.algorithms.VERL_LOG_STAGES` maps each to the estimate's
stages)."""


@dataclasses.dataclass(frozen=True)
class StageTimes:
    """Stage times of one RL step, read from a run log.

    Attributes:
      step: The training step counter from the log (non-negative).
      times_s: Seconds per stage, keyed by the canonical names of
        `STAGE_NAMES` (``gen``, ``ref``, ``old_log_prob``, ``values``,
        ``reward``, ``adv``, ``update_actor``, ``update_critic``,
        ``update_weights`` for weight sync, ``step`` for the whole step);
        only the stages the log had. Stored read-only, in canonical order.

    Raises:
      ValueError: if `step` is not a non-negative integer, a key is not a
        stage name, or a time is not a finite non-negative number.
    """

    step: int
    times_s: Mapping[str, float]

    def __post_init__(self):
        if isinstance(self.step, bool) or not isinstance(self.step, int):
            raise ValueError(f"step={self.step!r} must be an int")
        if self.step < 0:
            raise ValueError(f"step={self.step} must be >= 0")
        if not isinstance(self.times_s, Mapping):
            raise ValueError(f"times_s={self.times_s!r} must be a mapping")
        for key, value in self.times_s.items():
            if key not in STAGE_NAMES:
                raise ValueError(
                    f"times_s key {key!r} is not a stage; known: {list(STAGE_NAMES)}"
                )
            if isinstance(value, bool) or not isinstance(
                value, (int, float, np.integer, np.floating)
            ):
                raise ValueError(f"times_s[{key!r}]={value!r} must be a number")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"times_s[{key!r}]={value!r} must be finite and >= 0")
        ordered = {k: float(self.times_s[k]) for k in STAGE_NAMES if k in self.times_s}
        object.__setattr__(self, "times_s", types.MappingProxyType(ordered))

    def __hash__(self):
        return hash((self.step, tuple(self.times_s.items())))


def steady_state(records: Sequence[StageTimes], skip: int = 1) -> dict[str, float]:
    """Median stage times after the warm-up steps.

    The records are ordered by step, the first `skip` are dropped, and for each
    stage the median is taken over the remaining records that have it.

    Args:
      records: Per-step stage times, e.g. from `read_verl_log`.
      skip: Number of warm-up steps to drop (non-negative).

    Returns:
      Stage name -> median seconds, in the order of `STAGE_NAMES`, for every
      stage present in at least one remaining record.

    Raises:
      ValueError: if `skip` is not a non-negative int, an element of `records`
        is not a `StageTimes`, or no record remains after skipping.

    Example:
      >>> records = [StageTimes(1, {"gen": 9.0}), StageTimes(2, {"gen": 4.0}),
      ...            StageTimes(3, {"gen": 6.0})]
      >>> steady_state(records, skip=1)
      {'gen': 5.0}
    """
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip={skip!r} must be a non-negative int")
    for i, record in enumerate(records):
        if not isinstance(record, StageTimes):
            raise ValueError(f"records[{i}]={record!r} must be a StageTimes")
    kept = sorted(records, key=lambda r: r.step)[skip:]
    if not kept:
        raise ValueError(
            f"skip={skip} leaves no records out of len(records)={len(records)}"
        )
    medians: dict[str, float] = {}
    for stage in STAGE_NAMES:
        values = [r.times_s[stage] for r in kept if stage in r.times_s]
        if values:
            medians[stage] = float(np.median(values))
    return medians
