"""Readers for measured data: published tables and veRL run logs.

Two kinds of measurement feed the cost model:

* Figures published by others, packaged as CSV tables under `costmodel/data/`
  and read with `published_table` (:mod:`costmodel._src.fit.published`).
  Every row carries its source.
* Stage times of RL runs, read from veRL metric logs with `read_verl_log`
  (:mod:`costmodel._src.fit.verl_log`, which describes the log formats) and
  reduced to steady-state medians with `steady_state`
  (:mod:`costmodel._src.fit.stage_times`).
"""

from __future__ import annotations

from costmodel._src.fit.published import published_table
from costmodel._src.fit.stage_times import STAGE_NAMES
from costmodel._src.fit.stage_times import StageTimes
from costmodel._src.fit.stage_times import steady_state
from costmodel._src.fit.verl_log import read_verl_log

__all__ = ("STAGE_NAMES", "StageTimes", "published_table", "read_verl_log", "steady_state")
