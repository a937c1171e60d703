"""Published tables: figures measured by others, packaged as CSV tables under
`costmodel/data/` and read with `published_table`. Every row carries its source."""

from __future__ import annotations

from collections.abc import Sequence
import csv
from importlib import resources
import io

_TABLE_FILES: dict[str, str] = {
    "rl": "published_rl.csv",
    "training_inference": "published_training_inference.csv",
    "moe_fp8": "published_moe_fp8.csv",
    "rl_more": "published_rl_more.csv",
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
    "rl_more": (
        "id", "source", "commit_or_date", "model", "gpus", "gpu_type", "placement",
        "train_parallel", "gen_parallel", "prompt_len", "resp_max", "resp_mean",
        "prompts_per_step", "n_per_prompt", "mini_batch", "metric", "value", "unit",
        "breakdown", "confidence", "notes",
    ),
}  # fmt: skip


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

    Examples:
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
    for line, row in csv_rows(reader, header, source):
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


def csv_rows(reader, header: Sequence[str], source: str):
    """``(line number, row)`` of each non-empty row of a ``csv.reader`` past its
    header.

    Raises:
      ValueError: ``{source} line {n}`` for a row whose field count is not the
        header's.
    """
    for row in reader:
        line = reader.line_num
        if not row:
            continue
        if len(row) != len(header):
            raise ValueError(
                f"{source} line {line}: row has {len(row)} fields, header has "
                f"{len(header)}"
            )
        yield line, row
