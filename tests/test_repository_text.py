"""The project speaks of itself only: no text about how or when it was built.

Code, comments, docstrings, tests, notebooks, the README, the documentation and
the result files say what the code does and why. Dates stay where they are facts
of a cited source (a paper, a release, a commit) or the date a results file was
generated; a comment carries no dated timing of this code.
"""

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_TEXT = (".py", ".md", ".toml", ".ipynb", ".yml", ".yaml", ".cfg", ".txt")
# Words about the circumstances of the work, not about the code.
_NARRATIVE = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|this|that|previous|next|"
    r"earlier|later|last|same|one) (session|sitting)\b|\breview commit\b|"
    r"\b(code|this|that|previous|earlier) review\b", re.I)
# A dated measurement of this code in a comment: a date next to a machine or load.
_DATED_TIMING = re.compile(r"20\d\d-\d\d-\d\d[^\n]{0,40}\b(cores?|load|machine|measured)\b|"
                           r"\b(cores?|load|machine|measured)\b[^\n]{0,40}20\d\d-\d\d-\d\d", re.I)


def _tracked() -> list[pathlib.Path]:
  try:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
  except (OSError, subprocess.CalledProcessError):
    pytest.skip("not a git checkout")
  return [ROOT / f for f in out.splitlines()
          if f.endswith(_TEXT) and not f.startswith("tests/data/") and (ROOT / f).is_file()]


def test_no_text_narrates_how_the_project_was_built():
  found = []
  for path in _tracked():
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
      if _NARRATIVE.search(line) and path.name != "test_repository_text.py":
        found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
  assert not found, "\n".join(found)


def test_no_comment_carries_a_dated_timing():
  found = []
  for path in _tracked():
    if path.suffix not in (".py", ".toml") or path.name == "test_repository_text.py":
      continue
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
      if _DATED_TIMING.search(line):
        found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
  assert not found, "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
  assert _NARRATIVE.search("measured in the sixth session of the day")
  assert _NARRATIVE.search("after the review commit (069e677)")
  assert not _NARRATIVE.search('@pytest.fixture(scope="session")')
  assert not _NARRATIVE.search("the last turn of a multi-turn episode")
  assert _DATED_TIMING.search("# took 5.4 s (2 cores, 2026-12-06)")
  assert not _DATED_TIMING.search("# vLLM blog 2024-09-05, 2.7x throughput")
