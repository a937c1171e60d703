"""The README and the documentation site: every example runs and prints what it shows.

In README.md and docs/*.md, the ``python`` blocks of a page run in order in one
namespace, and a ``text`` block right after a ``python`` block is the output it
must print; a ``console`` block is one command (``$ ...``, continued with a
trailing backslash) followed by its standard output. Outputs are compared as
doctest does with ELLIPSIS: ``...`` stands for any text (timings, lines left
out). ``bash`` blocks (installs, searches of minutes) are shown, not run.
The site must build with ``mkdocs build --strict`` (warnings are errors).

``python tests/test_docs.py --update`` rewrites each shown output that no longer
matches and has no ``...`` with what the code prints now, and lists the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import doctest
import io
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
_CHECKER = doctest.OutputChecker()


@dataclasses.dataclass
class Block:
  """One fenced block of a page: its language, text, line and span in the page."""
  lang: str
  text: str
  line: int
  span: tuple[int, int]


def blocks(text: str) -> list[Block]:
  """The top-level fenced blocks of a Markdown page, in order."""
  return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, m.span(2))
          for m in _FENCE.finditer(text)]


def _followed_by_output(text: str, a: Block, b: Block) -> bool:
  between = text[a.span[1]:b.span[0]]
  return b.lang == "text" and re.fullmatch(r"```\s*\n\s*```text[^\n]*\n", between) is not None


def python_examples(page: pathlib.Path) -> list[tuple[Block, Block | None]]:
  """Each ``python`` block of ``page`` with the ``text`` block showing its output."""
  text = page.read_text(encoding="utf-8")
  bs = blocks(text)
  return [(b, bs[i + 1] if i + 1 < len(bs) and _followed_by_output(text, b, bs[i + 1]) else None)
          for i, b in enumerate(bs) if b.lang == "python"]


def console_examples(page: pathlib.Path) -> list[tuple[str, Block]]:
  """Each ``console`` block of ``page`` as (command, block); the output follows it."""
  out = []
  for b in blocks(page.read_text(encoding="utf-8")):
    if b.lang != "console":
      continue
    lines = b.text.splitlines()
    if not lines or not lines[0].startswith("$ "):
      raise ValueError(f"{page.name}:{b.line}: a console block starts with '$ command'")
    command = [lines[0][2:]]
    while command[-1].endswith("\\"):
      command[-1] = command[-1][:-1]
      command.append(lines[len(command)].strip())
    out.append((" ".join(c.strip() for c in command), b))
  return out


def _console_output(block: Block) -> str:
  lines = block.text.splitlines(keepends=True)
  n = 1
  while lines[n - 1].rstrip("\n").endswith("\\"):
    n += 1
  return "".join(lines[n:])


def _matches(want: str, got: str) -> bool:
  strip = lambda s: "\n".join(line.rstrip() for line in s.strip("\n").splitlines()) + "\n"
  return _CHECKER.check_output(strip(want), strip(got), doctest.ELLIPSIS)


def run_python(page: pathlib.Path) -> list[tuple[Block, Block | None, str]]:
  """Runs ``page``'s python blocks in order in one namespace, from the repository
  root; returns each block, its shown output and what it printed."""
  namespace: dict = {"__name__": f"docs_{page.stem}"}
  results = []
  cwd = os.getcwd()
  os.chdir(ROOT)
  try:
    for code, shown in python_examples(page):
      buf = io.StringIO()
      with contextlib.redirect_stdout(buf):
        exec(compile(code.text, f"{page.name}:{code.line}", "exec"), namespace)  # pylint: disable=exec-used
      results.append((code, shown, buf.getvalue()))
  finally:
    os.chdir(cwd)
  return results


def run_console(command: str) -> subprocess.CompletedProcess:
  """``command`` in a shell at the repository root, this checkout's packages first."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                   os.environ.get("PYTHONPATH")])))
  return subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600, check=False)


_PY_PAGES = [p for p in PAGES if python_examples(p)]
_CONSOLE = [(p, c, b) for p in PAGES for c, b in console_examples(p)]


@pytest.mark.parametrize("page", _PY_PAGES, ids=[p.name for p in _PY_PAGES])
def test_python_examples_print_what_they_show(page):
  for code, shown, got in run_python(page):
    if shown is not None:
      assert _matches(shown.text, got), (
          f"{page.name}:{code.line}: the example prints\n{got}\nbut the page shows\n{shown.text}")


@pytest.mark.parametrize("page,command,block", _CONSOLE,
                         ids=[f"{p.name}:{b.line}" for p, _, b in _CONSOLE])
def test_console_examples_print_what_they_show(page, command, block):
  done = run_console(command)
  assert done.returncode == 0, f"{page.name}:{block.line}: `{command}` failed:\n{done.stderr[-2000:]}"
  want = _console_output(block)
  assert _matches(want, done.stdout), (
      f"{page.name}:{block.line}: `{command}` prints\n{done.stdout}\nbut the page shows\n{want}")


def test_every_printing_example_shows_its_output():
  # A python block's output is only checked when a text block follows it
  # directly; a text block after other text is a listing, not an output.
  for page in PAGES:
    for code, shown in python_examples(page):
      if "print(" in code.text:
        assert shown is not None, f"{page.name}:{code.line}: a block that prints shows no output"


def test_readme_is_short_and_links_the_documentation():
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  assert len(readme.splitlines()) <= 300
  for page in sorted((ROOT / "docs").glob("*.md")):
    if page.name != "index.md":
      assert f"docs/{page.name}" in readme, f"the README links no docs/{page.name}"


def test_readme_test_command_is_what_ci_runs():
  """The README's test command installs the extras ``.ci/run`` installs and runs
  the pytest command ``.ci/run`` runs, flags included."""
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  shown = re.search(r"^python -m pip install (.+?) && (python -m pytest[^\n]*)$", readme, re.M)
  assert shown, "the README shows no 'pip install ... && python -m pytest ...' command"
  ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
  lines = [ln.strip() for ln in ci.splitlines() if not ln.lstrip().startswith("#")]
  pytest_lines = [ln for ln in lines if ln.startswith("python -m pytest")]
  assert pytest_lines == [shown.group(2)]
  extras = re.search(r'"\.\[([\w,]+)\]"', shown.group(1)).group(1)
  assert any(ln.startswith("python -m pip install") and f'".[{extras}]"' in ln for ln in lines)


def test_readme_accuracy_rows_are_the_fidelity_reports():
  readme = (ROOT / "README.md").read_text(encoding="utf-8")
  table = re.search(r"<!-- accuracy table:.*?-->\n(.*?)<!-- accuracy table end -->", readme, re.S)
  assert table, "the README's accuracy table lost its markers"
  rows = [r for r in table.group(1).splitlines() if r.startswith("| ") and "---" not in r][1:]
  report = (ROOT / "benchmarks" / "results" / "fidelity.md").read_text(encoding="utf-8")
  assert len(rows) >= 5
  for row in rows:
    assert row in report.splitlines(), f"README row not in fidelity.md (regenerate it): {row}"


def _shown_commands() -> list[tuple[str, str]]:
  out = []
  for page in PAGES:
    for b in blocks(page.read_text(encoding="utf-8")):
      if b.lang in ("bash", "console"):
        text = b.text.replace("\\\n", " ")
        for line in text.splitlines():
          for part in re.split(r"&&|;", line.lstrip("$ ")):
            words = part.split()
            if words and words[0] in ("rlcost-plan", "rlcost-estimate"):
              out.append((f"{page.name}:{b.line}", part.strip()))
  return out


def test_shown_commands_use_flags_the_commands_define():
  # The commands shown but not run (searches of minutes) still name real flags.
  script = ("import sys; from absl import flags; import search.{}; "
            "print(' '.join(flags.FLAGS))")
  defined = {}
  for command, module in (("rlcost-plan", "plan"), ("rlcost-estimate", "estimate_cli")):
    done = subprocess.run([sys.executable, "-c", script.format(module)], cwd=ROOT,
                          capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    defined[command] = set(done.stdout.split()) | {"help", "helpfull", "helpshort"}
  shown = _shown_commands()
  assert len(shown) >= 5
  for where, command in shown:
    words = command.split()
    for word in words[1:]:
      if word.startswith("--"):
        name = word[2:].split("=")[0]
        assert name in defined[words[0]] or (name.startswith("no") and name[2:] in
                                             defined[words[0]]), f"{where}: {words[0]} has no --{name}"


def test_site_builds_with_warnings_as_errors(tmp_path):
  pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
  done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                         str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-4000:]
  assert (tmp_path / "site" / "reference" / "costmodel" / "index.html").is_file()
  assert (tmp_path / "site" / "notebooks" / "01_estimate_grpo_step" / "index.html").is_file()


def _update() -> int:
  """Rewrites stale shown outputs in place; returns how many it could not rewrite."""
  left = 0
  for page in PAGES:
    text = page.read_text(encoding="utf-8")
    edits = []
    for code, shown, got in run_python(page) if python_examples(page) else []:
      if shown is not None and not _matches(shown.text, got):
        edits.append((shown, shown.span, got))
    for command, block in console_examples(page):
      want, got = _console_output(block), run_console(command).stdout
      if not _matches(want, got):
        start = block.span[1] - len(want)
        edits.append((block, (start, block.span[1]), got))
    for block, (a, b), got in sorted(edits, key=lambda e: -e[1][0]):
      if "..." in text[a:b]:
        left += 1
        print(f"{page.name}:{block.line}: stale, has '...', fix by hand; it prints:\n{got}")
        continue
      text = text[:a] + got.rstrip("\n") + "\n" + text[b:]
      print(f"{page.name}:{block.line}: updated")
    page.write_text(text, encoding="utf-8")
  return left


if __name__ == "__main__":
  if sys.argv[1:] != ["--update"]:
    sys.exit(f"usage: python {shlex.quote(sys.argv[0])} --update")
  sys.path.insert(0, str(ROOT))
  sys.exit(1 if _update() else 0)
