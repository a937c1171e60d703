"""The tables of the fidelity report (:mod:`benchmarks.fidelity_report`)."""

from __future__ import annotations

import re

import numpy as np

import costmodel as cm

# The bars on out-of-source median absolute errors, by kind of row.
BARS = {"RL step": 0.12, "generation": 0.20, "log-prob": 0.20, "update": 0.20, "sync": 0.20,
        "training": 0.05, "inference (decode)": 0.10}
# Neither sign may hold more than this share of the RL step and stage rows.
SIGN_BAR = 0.60
ORDER = ("RL step", "generation", "log-prob", "update", "sync", "rest (untimed)",
         "multi-turn step", "multi-turn generation", "multi-turn log-prob", "LoRA RL step",
         "training", "inference (decode)", "kernel", "collective", "memory", "moe", "fp8",
         "feasibility", "lora_max_batch")


def display_kind(r: cm.validation.SourceRow) -> str:
  """The kind a row is summarised under."""
  if r.group == "rl_step":
    return "RL step"
  if r.group in ("rl_stage", "rl_sync"):
    return r.kind
  if r.group == "rl_rest":
    return "rest (untimed)"
  if r.group == "rl_multi_turn":
    return f"multi-turn {r.kind}"
  if r.group == "rl_lora":
    return "LoRA RL step"
  if r.group == "decode":
    return "inference (decode)"
  return r.group


def predict_not_fitted(cases, v: cm.validation.SourceValidation) -> list[cm.validation.SourceRow]:
  """Rows never fitted, predicted with the defaults, the fit on every source
  and the fit without their own source (the defaults' where every fit
  source is theirs)."""
  out = []
  for c in cases:
    src = cm.validation.source_of(c.row_id)
    held = v.held_out.get(src, v.efficiency)
    out.append(cm.validation.SourceRow(c.row_id, c.group, cm.validation.stage_kind(c), c.label, src,
                            float(c.published), float(c.predict(v.initial)),
                            float(c.predict(v.efficiency)), float(c.predict(held))))
  return out


def _median(e) -> float:
  return float(np.median(np.abs(e))) if len(e) else float("nan")


def method(v: cm.validation.SourceValidation, loss: str, weighting: str, n_fit: int,
           n_other: int) -> list[str]:
  scores = ", ".join(f"{p:g}: {s:.3f}" for p, s in v.scores.items())
  return [
      "## Out of source: each source left out, fitted on the others, predicted", "",
      f"{n_fit} cases from {len(v.sources())} sources are fitted; each source (a framework's "
      "document, a paper, a repository's table, an issue thread; "
      "`costmodel.validation.source_of`) is left out in turn, the parameters are fitted on "
      "the others and its cases are predicted. The figures below are these out-of-source "
      f"predictions. {loss} loss of the log errors, weighted per {weighting}, pulled towards "
      f"the default parameters with prior weight {v.prior:g}, the weight whose out-of-source "
      f"predictions score best (mean over groups of the median absolute log error: {scores}). "
      f"{n_other} more rows (feasibility, largest batch, multi-turn, the untimed rest) are "
      "never fitted and are predicted with the fit that left their source out.", "",
      "Caveats. The prior's centre is the default parameters, which were set on all public "
      "rows, so a held-out source still pulls on its own predictions through them; with the "
      "chosen weight the fits move the parameters little, and the out-of-source figures "
      "stay close to the defaults'. The mean response lengths that veRL's DAPO runs do not "
      "publish are inferred from one update stage per group of runs "
      "(`costmodel.validation.inferred_means`); those anchor stages are not cases.", ""]


def kind_table(rows) -> list[str]:
  by: dict[str, list] = {}
  for r in rows:
    by.setdefault(display_kind(r), []).append(r)
  lines = ["| kind | rows | out of source: median abs error | worst | too fast / too slow | "
           "in sample | defaults | bar |", "|---|---:|---:|---:|---:|---:|---:|---|"]
  for kind in [k for k in ORDER if k in by] + sorted(set(by) - set(ORDER)):
    g = by[kind]
    e = np.asarray([r.error_out_of_source for r in g])
    fast, slow = int((e < 0).sum()), int((e > 0).sum())
    bar = BARS.get(kind)
    verdict = "" if bar is None else (
        f"<= {bar:.0%}: {'met' if _median(e) <= bar else 'not met'}")
    if kind in BARS and kind not in ("training", "inference (decode)"):
      share = max(fast, slow) / max(len(e), 1)
      verdict += f"; signs {'met' if share <= SIGN_BAR else 'not met'} ({share:.0%})"
    lines.append(f"| {kind} | {len(g)} | {_median(e):.1%} | {np.abs(e).max():.1%} | "
                 f"{fast} / {slow} | {_median([r.error_in_sample for r in g]):.1%} | "
                 f"{_median([r.error_default for r in g]):.1%} | {verdict} |")
  rl = [r for r in rows if display_kind(r) in ("RL step", "generation", "log-prob", "update",
                                               "sync")]
  e = np.asarray([r.error_out_of_source for r in rl])
  return (["### Error by kind of row", ""] + lines
          + ["", f"RL steps and stages together: {len(e)} rows, {int((e < 0).sum())} too fast, "
             f"{int((e > 0).sum())} too slow, median {_median(e):.1%} out of source.", ""])


def source_table(rows) -> list[str]:
  lines = ["### Error per held-out source", "",
           "| held-out source | rows | kinds | out of source | in sample | defaults |",
           "|---|---:|---|---:|---:|---:|"]
  by: dict[str, list] = {}
  for r in rows:
    by.setdefault(r.source, []).append(r)
  for src in sorted(by, key=lambda s: (-len(by[s]), s)):
    g = by[src]
    kinds = ", ".join(sorted({display_kind(r) for r in g}))
    lines.append(f"| {src} | {len(g)} | {kinds} | "
                 f"{_median([r.error_out_of_source for r in g]):.1%} | "
                 f"{_median([r.error_in_sample for r in g]):.1%} | "
                 f"{_median([r.error_default for r in g]):.1%} |")
  return lines + [""]


def stage_table(rows) -> list[str]:
  """Every RL run's step, stages, weight sync and untimed rest, with signs."""
  keep = ("RL step", "generation", "log-prob", "update", "rest (untimed)", "sync",
          "multi-turn step", "multi-turn generation", "multi-turn log-prob")
  sel = [r for r in rows if display_kind(r) in keep]
  lines = ["## Stage by stage: every published RL run", "",
           "Negative errors are predictions too fast. `gen` of a colocated veRL run is "
           "compared with generation + switch + weight sync (its timer covers the engine's "
           "wake-up and the reshard).", "",
           "| row | case | kind | published | defaults | out of source |",
           "|---|---|---|---:|---:|---:|"]
  for r in sorted(sel, key=lambda r: (r.source, r.row_id, keep.index(display_kind(r)))):
    lines.append(f"| {r.row_id} | {r.label} | {display_kind(r)} | {r.published:,.4g} | "
                 f"{r.default:,.4g} ({r.error_default:+.1%}) | "
                 f"{r.out_of_source:,.4g} ({r.error_out_of_source:+.1%}) |")
  return lines + [""]


def overhead_notes() -> list[str]:
  return [
      "", "What the `overhead` column holds, by stage (every term a parameter of the "
      "table below, with its mechanism and source):", "",
      "- `generate`: the engine's per-step cost (`decode_step_overhead_s`), per running "
      "sequence per step (`decode_seq_overhead_s`), per extra engine GPU "
      "(`decode_rank_overhead_s`), eager launches (`eager_layer_overhead_s`) and cross-node "
      "engines (`cross_node_step_overhead_s`), summed over the decode steps; a fixed "
      "`generate_overhead_s`; the batch's hand-off from the controller "
      "(`batch_transfer_bytes_per_token` at `batch_transfer_bytes_per_s`).",
      "- `switch`: the engine's sleep and wake (`switch_overhead_s`).",
      "- `reference`, `old_log_prob`: a fixed `infer_overhead_s`; the batch's hand-off to "
      "the workers; the per-token outputs, padded to [samples, max response], taken back "
      "by the controller (`controller_return_bytes_per_s`: 8 bytes per padded response "
      "token for old log-probs and entropy, 4 for the reference log-probs).",
      "- `actor_update`: `train_overhead_s` per optimizer update, `train_call_overhead_s` "
      "per call into the trainer, the batch's hand-off.",
      "- `weight_sync`: `sync_overhead_s`, per tensor (`sync_per_tensor_s`) or per bucket "
      "(`sync_per_bucket_s`) costs of its backend.",
      "- `reward`: none (the reward is CPU time, `RLJob.reward_cpu_s_per_sample`).", ""]


def _attribute_docs() -> dict[str, str]:
  """``Efficiency``'s docstring, one entry per attribute."""
  doc = cm.Efficiency.__doc__ or ""
  body = doc.split("Attributes:", 1)[1] if "Attributes:" in doc else ""
  out: dict[str, str] = {}
  name = None
  for line in body.splitlines():
    m = re.match(r"^    (\w+): (.*)$", line)
    if m:
      name = m.group(1)
      out[name] = m.group(2).strip()
    elif name and line.strip():
      out[name] += " " + line.strip()
  return out


def parameter_table(v: cm.validation.SourceValidation) -> list[str]:
  docs = _attribute_docs()
  lines = ["## Parameters: mechanism and source", "",
           "Each `Efficiency` parameter as documented in its docstring (mechanism, source), "
           "its default, the fit on every source and the range over the fits that leave one "
           "source out (`fixed`: not fitted).", "",
           "| parameter | default | fit on all | leave-one-out range | mechanism and source |",
           "|---|---:|---:|---:|---|"]
  for name, text in docs.items():
    d = float(getattr(v.initial, name))
    a = float(getattr(v.efficiency, name))
    held = [float(getattr(e, name)) for e in v.held_out.values()]
    fixed = all(h == d for h in held) and a == d
    rng = "fixed" if fixed else f"{min(held):.4g} - {max(held):.4g}"
    lines.append(f"| `{name}` | {d:.4g} | {a:.4g} | {rng} | {text.replace('|', '/')} |")
  return lines + [""]
