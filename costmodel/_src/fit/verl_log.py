"""Reads per-step stage times from veRL run logs (`read_verl_log`).

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
"""

from __future__ import annotations

from collections.abc import Mapping
import csv
import io
import json
import math
import os

from costmodel._src.fit.published import csv_rows
from costmodel._src.fit.stage_times import STAGE_NAMES
from costmodel._src.fit.stage_times import StageTimes
from costmodel._src.step import algorithms

_VERL_KEYS: dict[str, str] = {f"timing_s/{stage}": stage for stage in STAGE_NAMES}
_VERL_KEYS.update({f"timing_s/{alias}": stage
                   for alias, stage in algorithms.VERL_LOG_ALIASES.items()})

_STEP_KEYS: tuple[str, ...] = ("step", "training/global_step", "_step", "Step")


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
    for line, row in csv_rows(reader, header, name):
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
