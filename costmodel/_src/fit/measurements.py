"""Readers for measured data: published tables and veRL run logs.

Two kinds of measurement feed the cost model:

* Figures published by others, packaged as CSV tables under `costmodel/data/`
  and read with `published_table`. Every row carries its source.
* Stage times of RL runs, read from veRL metric logs with `read_verl_log` and
  reduced to steady-state medians with `steady_state`.

veRL logs one flat metrics dict per training step. The stage times are the keys
``timing_s/<stage>`` and map to the canonical stage names of `STAGE_NAMES`
(the estimate stages each one times are in
`costmodel._src.step.algorithms.VERL_LOG_STAGES`):

=============================  ==================
log key                        stage
=============================  ==================
``timing_s/gen``               ``gen``
``timing_s/ref``               ``ref``
``timing_s/old_log_prob``      ``old_log_prob``
``timing_s/values``            ``values``
``timing_s/reward``            ``reward``
``timing_s/adv``               ``adv``
``timing_s/update_actor``      ``update_actor``
``timing_s/update_critic``     ``update_critic``
``timing_s/update_weights``    ``update_weights``
``timing_s/reshard``           ``update_weights``
``timing_s/sync_weights``      ``update_weights``
``timing_s/step``              ``step`` (whole step)
=============================  ==================

Other ``timing_s/`` keys (``timing_s/testing``, ``timing_s/save_checkpoint``,
...) and all other metrics are ignored. The step counter is the first present
of ``step``, ``training/global_step``, ``_step`` (wandb) and ``Step`` (wandb
panel export).

Two file formats are read; the format follows the extension (``.jsonl`` and
``.json`` are JSON lines, ``.csv`` is CSV) and otherwise the content (a first
non-blank line starting with ``{`` means JSON lines).

JSON lines: one JSON object per line, either the flat metrics dict or the form
written by veRL's file logger, ``{"step": N, "data": {...metrics...}}``. Blank
lines and lines holding none of the stage keys (validation metrics, say) are
skipped; ``null`` is a missing value::

    {"step": 0, "data": {"val-core/acc/mean@1": 0.71}}
    {"step": 1, "data": {"timing_s/gen": 151.2, "timing_s/step": 244.0}}
    {"training/global_step": 2, "timing_s/gen": 149.8, "timing_s/step": 241.7}

CSV, for example a wandb export: a header row, then one row per step. A column
name may carry a run-name prefix ending in ``" - "``, which is stripped. Empty
cells are missing values; rows without any stage time are skipped::

    _step,myrun - timing_s/gen,myrun - timing_s/update_actor,myrun - timing_s/step
    1,151.2,90.4,244.0
    2,149.8,,241.7

Malformed input raises `ValueError` naming the file, the line number and the
field, e.g. ``run.jsonl line 7: field 'timing_s/gen' = 'abc' is not a number``.

Example:
  >>> records = read_verl_log("run.jsonl")  # doctest: +SKIP
  >>> steady_state(records, skip=1)["gen"]  # doctest: +SKIP
  150.2
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence
import csv
import dataclasses
from importlib import resources
import io
import json
import math
import os
import types

import numpy as np

from costmodel._src.step import algorithms

STAGE_NAMES: tuple[str, ...] = tuple(algorithms.VERL_LOG_STAGES)
"""Canonical stage keys of `StageTimes.times_s`, in pipeline order (veRL's own
names; `costmodel._src.step.algorithms.VERL_LOG_STAGES` maps each to the estimate's
stages)."""

_VERL_KEYS: dict[str, str] = {f"timing_s/{stage}": stage for stage in STAGE_NAMES}
_VERL_KEYS.update({f"timing_s/{alias}": stage
                   for alias, stage in algorithms.VERL_LOG_ALIASES.items()})

_STEP_KEYS: tuple[str, ...] = ("step", "training/global_step", "_step", "Step")

_TABLE_FILES: dict[str, str] = {
    "rl": "published_rl.csv",
    "training_inference": "published_training_inference.csv",
    "moe_fp8": "published_moe_fp8.csv",
}

_TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "rl": (
        "id", "system", "source", "source_commit", "model", "arch",
        "algorithm", "placement_mode", "num_gpus", "gpu_type", "gen_gpus",
        "train_gpus", "prompt_len", "response_len_max", "response_len_mean",
        "prompts_per_step", "rollouts_per_prompt", "train_global_batch",
        "mini_batch", "train_parallel", "gen_parallel", "metric", "value",
        "unit", "stage_breakdown", "baseline_or_speedup", "confidence",
        "missing_fields", "notes",
    ),
    "training_inference": (
        "id", "category", "workload", "hardware", "n_gpus", "precision", "tp",
        "pp", "dp", "cp", "ep", "other_parallel_and_options", "seq_len",
        "global_batch", "micro_batch", "model_dims", "metric", "value",
        "unit", "derived", "source", "notes",
    ),
    "moe_fp8": (
        "id", "category", "workload", "hardware", "n_gpus", "precision", "parallel",
        "batch_seq", "metric", "value", "unit", "source", "notes",
    ),
}  # fmt: skip


# ---------------------------------------------------------------------------
# Published tables.


def published_table(name: str) -> list[dict[str, str]]:
    """Loads a packaged table of published measurements.

    The tables are read strictly: the header must hold exactly the expected
    columns, every row the same number of fields, and ids must be unique.
    Values are returned as the strings in the file (empty string for an empty
    cell), because several columns mix numbers and prose.

    Args:
      name: ``"rl"`` (RL post-training step times and stage breakdowns),
        ``"training_inference"`` (pre-training, kernel, collective and
        inference figures) or ``"moe_fp8"`` (MoE and FP8 kernels, training
        and serving).

    Returns:
      One dict per row, mapping column name to cell text, in file order.

    Raises:
      ValueError: if `name` is not a known table, or the packaged file is
        malformed (missing or unexpected column, ragged or duplicate row).

    Example:
      >>> rows = published_table("rl")
      >>> rows[0]["metric"], rows[0]["unit"]
      ('mean step time', 's')
    """
    if not isinstance(name, str) or name not in _TABLE_FILES:
        raise ValueError(
            f"name={name!r} is not a published table; known names: "
            f"{sorted(_TABLE_FILES)}"
        )
    filename = _TABLE_FILES[name]
    resource = resources.files("costmodel") / "data" / filename
    text = resource.read_text(encoding="utf-8")
    return _parse_table(text, filename, _TABLE_COLUMNS[name])


def _parse_table(
    text: str, source: str, columns: Sequence[str]
) -> list[dict[str, str]]:
    """Parses CSV `text` whose header must be exactly `columns` (any order)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{source}: file is empty; expected header {list(columns)}")
    for column in columns:
        if column not in header:
            raise ValueError(f"{source} line 1: missing column {column!r}")
    for column in header:
        if column not in columns:
            raise ValueError(
                f"{source} line 1: unexpected column {column!r}; expected "
                f"{list(columns)}"
            )
    if len(set(header)) != len(header):
        raise ValueError(f"{source} line 1: duplicate column in header {header}")
    rows: list[dict[str, str]] = []
    seen_ids: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise ValueError(
                f"{source} line {line}: row has {len(row)} fields, header has "
                f"{len(header)}"
            )
        record = dict(zip(header, row, strict=False))
        row_id = record.get("id")
        if row_id is not None:
            if row_id in seen_ids:
                raise ValueError(
                    f"{source} line {line}: field 'id' = {row_id!r} repeats the "
                    f"id of line {seen_ids[row_id]}; ids must be unique"
                )
            seen_ids[row_id] = line
        rows.append({column: record[column] for column in columns})
    return rows


# ---------------------------------------------------------------------------
# Run logs.


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


def read_verl_log(path: str | os.PathLike[str]) -> list[StageTimes]:
    """Reads per-step stage times from a veRL metrics log.

    See the module docstring for the two formats (JSON lines and CSV) and the
    mapping of ``timing_s/`` keys to stage names.

    Args:
      path: A ``.jsonl``/``.json`` (JSON lines) or ``.csv`` file; other
        extensions are detected from the content.

    Returns:
      One `StageTimes` per logged step that had stage times, sorted by step.

    Raises:
      ValueError: if the file is empty, holds no stage times, or is malformed;
        the message names the file, the line number and the field.

    Example:
      >>> records = read_verl_log("run.jsonl")  # doctest: +SKIP
      >>> records[0].times_s["gen"]  # doctest: +SKIP
      151.2
    """
    name = os.fspath(path)
    with open(path, encoding="utf-8-sig", newline="") as f:
        text = f.read()
    if not text.strip():
        raise ValueError(
            f"{name}: file is empty; expected JSON lines or CSV with stage keys "
            f"{sorted(_VERL_KEYS)}"
        )
    if _is_jsonl(name, text):
        numbered = _parse_jsonl(name, text)
    else:
        numbered = _parse_csv(name, text)
    if not numbered:
        raise ValueError(
            f"{name}: no step holds stage times; expected one of the keys "
            f"{sorted(_VERL_KEYS)}"
        )
    first_line: dict[int, int] = {}
    for line, record in numbered:
        if record.step in first_line:
            raise ValueError(
                f"{name} line {line}: field 'step' = {record.step} repeats the "
                f"step of line {first_line[record.step]}; steps must be unique"
            )
        first_line[record.step] = line
    return sorted((record for _, record in numbered), key=lambda r: r.step)


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


def _is_jsonl(name: str, text: str) -> bool:
    suffix = os.path.splitext(name)[1].lower()
    if suffix in (".jsonl", ".json"):
        return True
    if suffix == ".csv":
        return False
    first = next(line for line in text.splitlines() if line.strip())
    return first.lstrip().startswith("{")


def _parse_jsonl(name: str, text: str) -> list[tuple[int, StageTimes]]:
    numbered = []
    for line, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{name} line {line}: not valid JSON ({e.msg} at column {e.colno})"
            ) from None
        if not isinstance(obj, dict):
            raise ValueError(
                f"{name} line {line}: expected a JSON object, got {type(obj).__name__}"
            )
        metrics = obj
        outer_step = None
        if isinstance(obj.get("data"), dict):  # veRL file logger form.
            metrics = obj["data"]
            outer_step = obj.get("step")
        step_fields = {k: metrics.get(k) for k in _STEP_KEYS}
        if not _missing(outer_step):
            step_fields["step"] = outer_step
        record = _record(name, line, metrics, step_fields, from_text=False)
        if record is not None:
            numbered.append((line, record))
    return numbered


def _parse_csv(name: str, text: str) -> list[tuple[int, StageTimes]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = None
    for row in reader:
        if row:
            header = row
            break
    header_line = reader.line_num
    if header is None:
        raise ValueError(f"{name}: no header row; expected CSV with timing columns")
    columns = [cell.strip().rpartition(" - ")[2] for cell in header]
    wanted = set(_VERL_KEYS) | set(_STEP_KEYS)
    seen: dict[str, str] = {}
    for raw, column in zip(header, columns, strict=False):
        if column in wanted:
            if column in seen:
                raise ValueError(
                    f"{name} line {header_line}: columns {seen[column]!r} and "
                    f"{raw!r} both give field {column!r}"
                )
            seen[column] = raw
    if not any(c in _VERL_KEYS for c in columns):
        raise ValueError(
            f"{name} line {header_line}: no timing columns; expected one of "
            f"{sorted(_VERL_KEYS)}"
        )
    if not any(c in _STEP_KEYS for c in columns):
        raise ValueError(
            f"{name} line {header_line}: no step column; expected one of "
            f"{list(_STEP_KEYS)}"
        )
    numbered = []
    for row in reader:
        line = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise ValueError(
                f"{name} line {line}: row has {len(row)} fields, header has "
                f"{len(header)}"
            )
        fields = {c: cell for c, cell in zip(columns, row, strict=False) if c in wanted}
        record = _record(name, line, fields, fields, from_text=True)
        if record is not None:
            numbered.append((line, record))
    return numbered


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _record(
    name: str,
    line: int,
    metrics: Mapping[str, object],
    step_fields: Mapping[str, object],
    from_text: bool,
) -> StageTimes | None:
    """Builds the record of one line; None if it holds no stage time."""
    times_s: dict[str, float] = {}
    source_key: dict[str, str] = {}
    for key, stage in _VERL_KEYS.items():
        raw = metrics.get(key)
        if _missing(raw):
            continue
        value = _number(name, line, key, raw, from_text)
        if not math.isfinite(value):
            raise ValueError(
                f"{name} line {line}: field {key!r} = {raw!r} is not finite"
            )
        if value < 0:
            raise ValueError(
                f"{name} line {line}: field {key!r} = {raw!r} is negative; "
                "times must be >= 0"
            )
        if stage in times_s:
            raise ValueError(
                f"{name} line {line}: fields {source_key[stage]!r} and {key!r} "
                f"both give stage {stage!r}; keep one"
            )
        times_s[stage] = value
        source_key[stage] = key
    if not times_s:
        return None
    for key in _STEP_KEYS:
        raw = step_fields.get(key)
        if _missing(raw):
            continue
        value = _number(name, line, key, raw, from_text)
        if not value.is_integer() or value < 0:
            raise ValueError(
                f"{name} line {line}: field {key!r} = {raw!r} is not a "
                "non-negative integer"
            )
        return StageTimes(step=int(value), times_s=times_s)
    raise ValueError(
        f"{name} line {line}: no step counter; expected one of the fields "
        f"{list(_STEP_KEYS)}"
    )


def _number(name: str, line: int, key: str, raw: object, from_text: bool) -> float:
    """Converts a cell (CSV) or a JSON value to float, or raises."""
    if from_text and isinstance(raw, str):
        try:
            return float(raw.strip())
        except ValueError:
            pass
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    raise ValueError(f"{name} line {line}: field {key!r} = {raw!r} is not a number")
