"""Imports every RL example a framework ships, as shipped, and checks its stated facts.

Run by hand against git checkouts (or bare clones) of the frameworks at the
commits the exporters pin; the files are read with ``git archive`` into a
temporary folder (sourced files and ``defaults:`` chains resolve as in a
checkout) and never copied into this repository:

  python tools/corpus_check.py --verl ~/src/verl --openrlhf ~/src/OpenRLHF \\
      --nemo_rl ~/src/RL --slime ~/src/slime --areal ~/src/AReaL

Each file is imported with ``export.read_config(framework, path,
response_mean=R)`` and nothing else (R: 1,000 tokens, or half the run's
maximum response when that is shorter, or the smallest mean the cost model's
response bins allow under a very long maximum), as ``rlcost-estimate --from_<fw> FILE
--response_mean R`` does. A file is *imported*, *refused* (the one-line reason)
or *not RL* (an SFT, DPO, reward-model or generation run: not counted). For each
import, the facts the file states (GPU count, training backend, parallel
degrees, LoRA rank, token budgets) are read from the file by
:mod:`corpus_facts` and compared with the import; a mismatch is a *fact lost*.
The table goes to ``benchmarks/results/framework_examples.md``.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
sys.path.insert(0, os.path.dirname(__file__))

import corpus_facts as facts_lib  # noqa: E402

import export  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "results",
                   "framework_examples.md")
REPOSITORIES = {"verl": "verl-project/verl", "openrlhf": "OpenRLHF/OpenRLHF",
                "nemo_rl": "NVIDIA-NeMo/RL", "slime": "THUDM/slime", "areal": "inclusionAI/AReaL"}
# The folders each framework keeps its RL examples in (NeMo-RL's docs: the guides its
# configs' model paths point at, :mod:`export._src.model_guides`).
FOLDERS = {"verl": ("examples",), "openrlhf": ("examples",), "nemo_rl": ("examples", "docs"),
           "slime": ("scripts",), "areal": ("examples",)}
RESPONSE_MEAN = 1000


def _git(path: str) -> list[str]:
  return ["git", "-C", path] if os.path.isdir(os.path.join(path, ".git")) else [
      "git", f"--git-dir={path}"]


def checkout(path: str, commit: str, folders: tuple[str, ...], into: str) -> str:
  """The full commit id; ``folders`` of it extracted under ``into``."""
  full = subprocess.run([*_git(path), "rev-parse", f"{commit}^{{commit}}"], check=True,
                        capture_output=True, text=True).stdout.strip()
  archive = subprocess.run([*_git(path), "archive", full, *folders], check=True,
                           capture_output=True).stdout
  subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
  return full


def candidates(framework: str, root: str) -> list[str]:
  """The example files of ``framework`` under ``root`` (relative paths)."""
  out = []
  for d, _, files in os.walk(root):
    for f in files:
      rel = os.path.relpath(os.path.join(d, f), root)
      if facts_lib.is_candidate(framework, rel):
        out.append(rel)
  return sorted(out)


def check_file(framework: str, root: str, rel: str) -> dict:
  """One row: the file's kind, the outcome and the facts compared."""
  path = os.path.join(root, rel)
  try:
    stated = facts_lib.stated(framework, path)
  except ValueError as e:
    return {"file": rel, "status": "refused", "why": str(e), "lost": []}
  if stated is None:
    return {"file": rel, "status": "not RL", "why": "", "lost": []}
  mean = RESPONSE_MEAN
  for _ in range(2):
    try:
      imp = export.read_config(framework, path, response_mean=mean)
    except ValueError as e:
      m = re.search(r"\[1, max_response=(\d+)\]", str(e))
      low = re.search(r"mean=[\d.]+ is below (\d+), the smallest mean", str(e))
      if (m or low) and mean == RESPONSE_MEAN:
        mean = max(1, int(m.group(1)) // 2) if m else int(low.group(1)) + 1
        continue
      return {"file": rel, "status": "refused", "why": str(e).splitlines()[0], "lost": []}
    break
  lost = facts_lib.compare(stated, imp)
  return {"file": rel, "status": "imported", "why": "", "lost": lost,
          "not_modelled": list(imp.not_modelled)}


def _cause(why: str) -> str:
  """A refusal's kind: an architecture the model table lacks, or the construct named."""
  if "names no preset and no known architecture" in why:
    return "architecture not in the model table"
  if "names no model path" in why:
    return "no model path"
  if "is an instruction, not a path" in why:
    return "model path an instruction, not a path"
  m = re.match(r"([^:]+: [\w.\-]+)", why)
  return _cell(m.group(1) if m else why[:60])


def _cell(s: str) -> str:
  return s.replace("|", "\\|").replace("\n", " ")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  for fw in REPOSITORIES:
    p.add_argument(f"--{fw}", help=f"a checkout or bare clone of {REPOSITORIES[fw]}")
  p.add_argument("--out", default=OUT)
  args = p.parse_args(argv)
  rows, commits = {}, {}
  with tempfile.TemporaryDirectory() as tmp:
    for fw in REPOSITORIES:
      src = getattr(args, fw)
      if not src:
        continue
      pin = re.findall(r"\b[0-9a-f]{7,40}\b", export.get(fw).version)[-1]
      root = os.path.join(tmp, fw)
      os.makedirs(root)
      commits[fw] = checkout(os.path.expanduser(src), pin, FOLDERS[fw], root)
      rows[fw] = [check_file(fw, root, rel) for rel in candidates(fw, root)]
  rlcost = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse",
                           "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
  lines = ["# The frameworks' RL examples, imported as shipped", "",
           f"Written by `tools/corpus_check.py` on {datetime.date.today().isoformat()} at rlcost "
           f"{rlcost}: every RL example script and config each framework ships at the commit "
           "its exporter pins, imported with the file and `--response_mean` only "
           f""
           f"({RESPONSE_MEAN} tokens; half the maximum response when that is shorter; the "
           "smallest mean the response bins allow when that is longer). *Facts lost* "
           "counts imports whose GPU count, training backend, parallel degrees, LoRA rank or "
           "token budgets differ from what the file states.", "",
           "| framework | commit | RL examples | imported | refused | facts lost |",
           "|---|---|---:|---:|---:|---:|"]
  for fw, rs in rows.items():
    rl = [r for r in rs if r["status"] != "not RL"]
    ok = [r for r in rl if r["status"] == "imported"]
    lost = [r for r in ok if r["lost"]]
    lines.append(f"| {export.get(fw).framework} | {REPOSITORIES[fw]}@{commits[fw][:9]} | "
                 f"{len(rl)} | {len(ok)} ({100 * len(ok) / max(1, len(rl)):.0f}%) | "
                 f"{len(rl) - len(ok)} | {len(lost)} |")
  lines += ["", "Refusals by cause (the first words of the one-line reason):", ""]
  for fw, rs in rows.items():
    causes = collections.Counter(_cause(r["why"]) for r in rs if r["status"] == "refused")
    lines.append(f"- {export.get(fw).framework}: " + ("; ".join(
        f"{n} x {c}" for c, n in causes.most_common()) or "none"))
  for fw, rs in rows.items():
    lines += ["", f"## {export.get(fw).framework} @{commits[fw][:9]}", "",
              "| file | result | facts lost / not modelled |", "|---|---|---|"]
    for r in rs:
      if r["status"] == "not RL":
        continue
      result = "imported" if r["status"] == "imported" else f"refused: {_cell(r['why'])}"
      extra = "; ".join(r["lost"]) or "; ".join(r.get("not_modelled", []))
      lines.append(f"| {r['file']} | {result} | {_cell(extra)} |")
    skipped = [r["file"] for r in rs if r["status"] == "not RL"]
    if skipped:
      lines += ["", f"Not RL ({len(skipped)}): " + ", ".join(f"`{s}`" for s in skipped)]
  with open(args.out, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  why = collections.Counter(re.sub(r"\d+", "N", r["why"])[:90] for rs in rows.values()
                            for r in rs if r["status"] == "refused")
  for fw, rs in rows.items():
    rl = [r for r in rs if r["status"] != "not RL"]
    ok = sum(r["status"] == "imported" for r in rl)
    print(f"{fw}: {ok}/{len(rl)} imported, {sum(bool(r['lost']) for r in rl)} with facts lost")
  for w, n in why.most_common(15):
    print(f"  {n:3d}  {w}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
