"""Architectures of common open models by Hugging Face id (no download).

The facts live in ``costmodel/data/hf_models.yaml``, one entry per id with its
source: a built-in preset, another entry's architecture, or the model's
``config.json`` facts, read strictly by :func:`hf_config.from_hf_config`
(a missing or unknown key is an error). :func:`from_hf_id` maps an id, a
local path ending in such a name, or a fine-tune whose name shows its base,
to the architecture.

Name rules, tried in order on the id (case-insensitive):

1. the id itself is in the table;
2. its last path part, without a ``meta-`` prefix and release words
   (``RELEASE_WORDS``: Instruct, Chat, Base, it, pt, hf, FP8, AWQ, ...), is
   the same for an entry (so ``/ckpt/Qwen2.5-7B-Instruct`` is Qwen2.5-7B and
   ``Mistral-7B-Instruct-v0.3`` is Mistral-7B-v0.3);
3. entry names (so reduced) contained in it, bounded by the start or a
   separator on the left and by the end or ``-`` on the right
   (``OpenRLHF/Llama-3-8b-sft-mixture`` contains ``llama-3-8b``); a name
   inside a longer match does not count, and names of two different
   architectures are an error;
4. a name whose words give a family, one total size and ``moe``
   (``/Qwen3-30B-MoE-merge``) is the family's MoE entry of that size named
   with its active size (``Qwen3-30B-A3B``), when the entries that fit share
   one architecture.

Ids the cost model does not represent (``costmodel/data/hf_unsupported.yaml``,
each with its reason and source) are refused by the first two rules with
that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
import functools
import importlib.resources
import re
from typing import Any, NamedTuple

import yaml

from costmodel._src.specs import hf_config
from costmodel._src.specs import model_presets
from costmodel._src.specs.model import ModelSpec

_ENTRY_KEYS = {"preset", "same_as", "config", "source", "params", "params_source",
               "not_modelled"}
_PARAMS_KEYS = {"total", "active", "active_counts", "rtol"}
ACTIVE_COUNTS = ("both", "head", "neither")
# Words of a name that mark a release of an architecture, not another one.
RELEASE_WORDS = frozenset((
    "instruct", "chat", "base", "it", "pt", "hf", "fp8", "bf16", "awq", "gptq", "int4",
    "int8", "dynamic", "thinking"))


class Published(NamedTuple):
  """Published parameter counts of one table entry."""

  total: float
  active: float | None
  active_counts: str  # "both", "head" or "neither": which embeddings the active figure counts
  rtol: float
  source: str


def _table_text() -> str:
  return importlib.resources.files("costmodel").joinpath("data/hf_models.yaml").read_text(
      encoding="utf-8")


def _check_entry(model_id: str, entry: Any) -> None:
  where = f"hf_models.yaml: {model_id}"
  if not isinstance(entry, Mapping):
    raise ValueError(f"{where}: entry must be a mapping, got {entry!r}")
  unknown = sorted(set(entry) - _ENTRY_KEYS)
  if unknown:
    raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_ENTRY_KEYS)}")
  kinds = [k for k in ("preset", "same_as", "config") if k in entry]
  if len(kinds) != 1:
    raise ValueError(f"{where}: needs exactly one of preset, same_as, config; got {kinds}")
  if not isinstance(entry.get("source"), str) or not entry["source"].strip():
    raise ValueError(f"{where}: source={entry.get('source')!r} must name where the facts "
                     "come from")
  if "not_modelled" in entry and (not isinstance(entry["not_modelled"], str)
                                  or not entry["not_modelled"].strip()):
    raise ValueError(f"{where}: not_modelled={entry['not_modelled']!r} must name the part of "
                     "the checkpoint the architecture leaves out")
  has_params = "params" in entry or "params_source" in entry
  if kinds == ["config"] and not ("params" in entry and "params_source" in entry):
    raise ValueError(f"{where}: a config entry needs params and params_source (the "
                     "published counts it is checked against)")
  if kinds != ["config"] and has_params:
    raise ValueError(f"{where}: params belong to config entries; a {kinds[0]} entry takes "
                     "its counts from what it names")
  if "params" in entry:
    p = entry["params"]
    if not isinstance(p, Mapping) or "total" not in p or set(p) - _PARAMS_KEYS:
      raise ValueError(f"{where}: params={p!r} must be a mapping with total and optionally "
                       f"{sorted(_PARAMS_KEYS - {'total'})}")
    if ("active" in p) != ("active_counts" in p) or p.get("active_counts", "both") not in (
        ACTIVE_COUNTS):
      raise ValueError(f"{where}: params.active needs active_counts, one of {ACTIVE_COUNTS}")


@functools.cache
def table() -> dict[str, dict]:
  """The table, keyed by Hugging Face id, every entry checked."""
  data = yaml.safe_load(_table_text())
  if not isinstance(data, dict):
    raise ValueError("hf_models.yaml: top level must map ids to entries")
  for model_id, entry in data.items():
    _check_entry(model_id, entry)
  for model_id, entry in data.items():
    target = entry.get("same_as")
    if target is not None and (target not in data or "same_as" in data[target]):
      raise ValueError(f"hf_models.yaml: {model_id}: same_as={target!r} must name an entry "
                       "that is not itself a same_as")
    if "preset" in entry and entry["preset"] not in model_presets.PRESETS:
      raise ValueError(f"hf_models.yaml: {model_id}: preset={entry['preset']!r} is not a "
                       f"preset ({', '.join(model_presets.PRESETS)})")
  return data


def ids() -> tuple[str, ...]:
  """Hugging Face ids of the table, in table order."""
  return tuple(table())


@functools.cache
def _spec_of_entry(model_id: str) -> ModelSpec:
  entry = table()[model_id]
  if "same_as" in entry:
    return _spec_of_entry(entry["same_as"]).replace(name=model_id)
  if "preset" in entry:
    return model_presets.get(entry["preset"]).replace(name=model_id)
  try:
    return hf_config.from_hf_config(entry["config"], name=model_id, strict=True)
  except ValueError as e:
    raise ValueError(f"hf_models.yaml: {model_id}: {e}") from None


def published(model_id: str) -> Published:
  """Published counts behind an entry (a preset's for preset and same_as entries)."""
  entry = table()[model_id]
  if "same_as" in entry:
    return published(entry["same_as"])
  if "preset" in entry:
    p = model_presets.PUBLISHED[entry["preset"]]
    return Published(p.total, p.active, "both", p.rtol, f"preset {entry['preset']}")
  p = entry["params"]
  return Published(float(p["total"]), None if "active" not in p else float(p["active"]),
                   p.get("active_counts", "both"), float(p.get("rtol", 0.01)),
                   entry["params_source"])


def not_modelled(model_id: str) -> tuple[str, ...]:
  """Parts of a checkpoint its table architecture leaves out (a vision encoder), by the
  name rules of :func:`match`; ``()`` when the entry models the whole checkpoint.

  Raises:
    ValueError: as :func:`match`, when the id maps to no entry.
  """
  entry = table()[match(model_id)[0]]
  note = entry.get("not_modelled") or table().get(entry.get("same_as"), {}).get("not_modelled")
  return (note,) if note else ()


def _norm(name: str) -> str:
  return name.strip().rstrip("/").lower().replace("_", "-")


def _last(name: str) -> str:
  return _norm(name).rsplit("/", 1)[-1]


def _stem(last: str) -> str:
  words = last.removeprefix("meta-").split("-")
  return "-".join(w for w in words if w not in RELEASE_WORDS)


@functools.cache
def _by_stem() -> dict[str, tuple[str, ...]]:
  out: dict[str, list[str]] = {}
  for model_id in table():
    out.setdefault(_stem(_last(model_id)), []).append(model_id)
  return {k: tuple(v) for k, v in out.items()}


def _same_architecture(model_ids) -> bool:
  specs = {_spec_of_entry(i).replace(name="") for i in model_ids}
  return len(specs) == 1


def match(model_id: str) -> tuple[str, str]:
  """``(table id, rule)`` that ``model_id`` maps to; see the module docstring.

  Raises:
    ValueError: naming the id and the rule that failed, when nothing or two
      different architectures match.
  """
  if not isinstance(model_id, str) or not model_id.strip():
    raise ValueError(f"model_id={model_id!r} must be a non-empty Hugging Face id or path")
  lowered = {_norm(k): k for k in table()}
  if _norm(model_id) in lowered:
    return lowered[_norm(model_id)], "id"
  stems = _by_stem()
  stem = _stem(_last(model_id))
  if stem in stems:
    return stems[stem][0], f"last part {_last(model_id)!r} is {stem!r}"
  hits = []  # (start, end, entry ids) of every entry name found in the stem
  for name, entries in stems.items():
    for m in re.finditer(re.escape(name), stem):
      left_ok = m.start() == 0 or stem[m.start() - 1] in "-./"
      right_ok = m.end() == len(stem) or stem[m.end()] == "-"
      if left_ok and right_ok:
        hits.append((m.start(), m.end(), entries))
  if not hits:
    moe = _moe_by_size(stem)
    if moe is not None:
      return moe
    raise ValueError(
        f"model_id={model_id!r}: no entry of the table (costmodel/data/hf_models.yaml, "
        f"{len(table())} ids) is its id, its last part {stem!r} without release words, a "
        "name contained in it, or a family's one MoE of the size it states; give a preset "
        "or the model's config.json")
  # A name inside a longer match (DeepSeek-R1 in DeepSeek-R1-Distill-Qwen-7B) is not a hit.
  kept = [h for h in hits if not any(o[0] <= h[0] and h[1] <= o[1] and o[1] - o[0] > h[1] - h[0]
                                     for o in hits)]
  candidates = sorted({e for h in kept for e in h[2]})
  if not _same_architecture(candidates):
    raise ValueError(f"model_id={model_id!r}: names of different architectures appear in it: "
                     f"{candidates}; give the base model's id")
  best = max(kept, key=lambda h: h[1] - h[0])
  return best[2][0], f"name contains {stem[best[0]:best[1]]!r}"


_SIZE = re.compile(r"\d+(?:\.\d+)?b")
_ACTIVE = re.compile(r"a\d+(?:\.\d+)?b")


def _moe_by_size(stem: str) -> tuple[str, str] | None:
  """Rule 4: a name of words ``<family>-<size>...-moe...`` (``Qwen3-30B-MoE-merge``)
  is the one MoE entry of that family and total size, named
  ``<family>-<size>-a<active>`` (``Qwen3-30B-A3B``); None when the name does not
  say MoE or entries of more than one architecture (or none) fit."""
  words = stem.split("-")
  sizes = [w for w in words if _SIZE.fullmatch(w)]
  if "moe" not in words or len(words) < 3 or len(sizes) != 1:
    return None
  family, size = words[0], sizes[0]
  fits = sorted(e for name, entries in _by_stem().items() for e in entries
                if name.split("-")[0] == family and size in name.split("-")
                and any(_ACTIVE.fullmatch(w) for w in name.split("-")))
  if not fits or not _same_architecture(fits):
    return None
  return fits[0], f"name states {family!r}, {size!r} and 'moe': the family's one MoE of that size"


@functools.cache
def unsupported() -> dict[str, dict]:
  """Ids the cost model does not represent, each with ``reason`` and ``source``
  (``costmodel/data/hf_unsupported.yaml``)."""
  data = yaml.safe_load(importlib.resources.files("costmodel").joinpath(
      "data/hf_unsupported.yaml").read_text(encoding="utf-8"))
  for model_id, entry in data.items():
    if (not isinstance(entry, Mapping) or set(entry) != {"reason", "source"}
        or not all(isinstance(v, str) and v.strip() for v in entry.values())):
      raise ValueError(f"hf_unsupported.yaml: {model_id}: entry={entry!r} must give a reason "
                       "and a source")
    if _stem(_last(model_id)) in _by_stem():
      raise ValueError(f"hf_unsupported.yaml: {model_id} names an entry of hf_models.yaml")
  return data


def _refuse_unsupported(model_id: str) -> None:
  """Raises the recorded reason when ``model_id`` is an unsupported id or its last part."""
  for known, entry in unsupported().items():
    if _norm(model_id) == _norm(known) or _stem(_last(model_id)) == _stem(_last(known)):
      alias = "" if _norm(model_id) == _norm(known) else f" ({known})"
      raise ValueError(f"model_id={model_id!r}{alias} has no architecture in the model "
                       f"table: {entry['reason']}; give a preset or a config.json of a "
                       "supported model_type")


def from_hf_id(model_id: str) -> ModelSpec:
  """The architecture of a Hugging Face model id, a local path or a fine-tune name.

  >>> from_hf_id("OpenRLHF/Llama-3-8b-sft-mixture").total_params
  8030261248

  Raises:
    ValueError: when the id maps to no entry (the message names the id and the
      rules tried), to two different architectures, or to a model the cost model
      does not represent (the message gives the reason).
  """
  if isinstance(model_id, str):
    _refuse_unsupported(model_id)
  base, _ = match(model_id)
  return _spec_of_entry(base).replace(name=model_id.strip().rstrip("/"))


def get(name: str) -> ModelSpec:
  """A preset by name (case-insensitive), else the architecture of a Hugging Face id.

  ``get("qwen3-8b")`` is the preset; ``get("Qwen/Qwen3.5-397B-A17B")`` and
  ``get("OpenRLHF/Llama-3-8b-sft-mixture")`` go through :func:`from_hf_id`.

  Raises:
    ValueError: when ``name`` is neither; the message lists the presets and
      the Hugging Face rule that failed.
  """
  if isinstance(name, str) and name.lower() in model_presets.PRESETS:
    return model_presets.get(name)
  try:
    return from_hf_id(name)
  except ValueError as e:
    raise ValueError(f"unknown model {name!r}: not a preset ({', '.join(model_presets.PRESETS)})"
                     f" and not a known Hugging Face id: {e}") from None
