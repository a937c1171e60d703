"""Where each validation case comes from, and which kind of stage it measures.

Out-of-source validation holds out a whole source (a framework's document, a
paper, a repository's table, an issue thread) and predicts it from parameters
fitted on the others; this module names the source of every case from the
``source`` column of its row in ``costmodel/data`` and names its stage kind.

A source is the document the figures were read from: the repository (and
path) of a ``owner/repo:path`` source, ``owner/repo#N`` for an issue or pull
request, the repository for a repository's table or README. Two documents
that publish the same measurements count as one (:data:`SAME_SOURCE`).
"""

from __future__ import annotations

import functools
import re

from costmodel._src.fit import published
from costmodel._src.fit.validation.cases import Case

# Table name of a row id (``table:id``) -> name in ``published.published_table``.
_TABLES = {"training_inference": "training_inference", "rl": "rl", "rl_more": "rl_more",
           "moe_fp8": "moe_fp8"}

# Documents that publish the same runs (or one moved to a new path): one source.
SAME_SOURCE = {
    # veRL's fully-async policy README moved to docs/advance/fully_async.md; the
    # ablations N1-N9 and the main table rl:1-13 are the same runs' document.
    "verl-project/verl:docs/advance/fully_async.md":
        "volcengine/verl:verl/experimental/fully_async_policy/README.md",
    # Korthikanti et al.'s iteration times (Table 5) and activation memory
    # (Fig. 7), both as encoded by Calculon: one paper.
    "Korthikanti et al. arXiv:2205.05198": "calculon-ai/calculon",
}

STAGE_KINDS = ("generation", "log-prob", "update", "sync")
# veRL timer names (``timing_s/*``) -> stage kind.
_TIMER_KIND = {"gen": "generation", "old_log_prob": "log-prob", "ref": "log-prob",
               "update_actor": "update", "update_critic": "update", "values": "log-prob",
               "update_weights": "sync"}

_REPO = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)")
_NUMBER = re.compile(r"(?:issues?|pull(?: request)?|PR)\s*/?\s*#?\s*(\d+)", re.IGNORECASE)


def normalize(source: str) -> str:
  """The source key of a ``source`` column value.

  ``owner/repo:path`` keeps its path (one document of a repository);
  ``owner/repo`` issue or pull-request threads become ``owner/repo#N``; any
  other mention of a repository becomes the repository. A source naming no
  repository (a paper, a page) keeps its text up to the first parenthesis,
  semicolon or comma.

  Raises:
    ValueError: for an empty source.
  """
  text = source.strip()
  if not text or text == "same":
    raise ValueError(f"source={source!r} must name a document")
  text = text.removeprefix("github ").removeprefix("https://github.com/")
  repo = _REPO.match(text)
  if repo is not None and not text.startswith(("arXiv", "http")):
    name = repo.group(1)
    rest = text[repo.end():]
    if rest.startswith(":"):
      path = rest[1:].split()[0]
      key = f"{name}:{path}"
    else:
      number = _NUMBER.search(rest)
      key = f"{name}#{number.group(1)}" if number else name
  else:
    key = re.split(r"[(;,]", text)[0].strip()
    key = key.removesuffix(" abstract").strip()
  return SAME_SOURCE.get(key, key)


@functools.cache
def _table_sources(table: str) -> dict[str, str]:
  """Row id -> source key of one packaged table (``same`` repeats the row above)."""
  out, last = {}, None
  for row in published.published_table(table):
    raw = row["source"].strip()
    if raw == "same":
      if last is None:
        raise ValueError(f"table {table}: row {row['id']} says 'same' with no row above")
      out[row["id"]] = last
      continue
    last = normalize(raw)
    out[row["id"]] = last
  return out


def source_of(row_id: str) -> str:
  """The source key of a case's row id (``table:id``, or ``N27:<size>`` of
  veRL's LoRA max-batch rows).

  Raises:
    ValueError: for a row id of no known table or a row the table lacks.
  """
  table, _, rid = row_id.partition(":")
  if table.startswith("N") and table[1:].isdigit():  # N27:1.5b -> rl_more N27
    table, rid = "rl_more", table
  if table not in _TABLES:
    raise ValueError(f"row_id={row_id!r}: table {table!r} is not one of {sorted(_TABLES)}")
  sources = _table_sources(_TABLES[table])
  if rid not in sources:
    raise ValueError(f"row_id={row_id!r}: no row {rid!r} in table {table!r}")
  return sources[rid]


def stage_kind(case: Case) -> str:
  """``step``, a stage kind of :data:`STAGE_KINDS`, or the case's group for
  rows that are not RL steps or stages (training, decode, kernel, ...)."""
  if case.group == "rl_sync":
    return "sync"
  if case.group in ("rl_stage", "rl_multi_turn") and ": " in case.label:
    timer = case.label.rsplit(": ", 1)[1]
    if timer in _TIMER_KIND:
      return _TIMER_KIND[timer]
  if case.group in ("rl_step", "rl_multi_turn", "rl_lora"):
    return "step"
  return case.group
