"""A reader of launch scripts: runs the parts of a bash script that set a command's words.

The frameworks' launch scripts build one command (``python3 -m verl...``,
``python3 train.py``, ``deepspeed --module openrlhf...``) from variables with
defaults (``${X:-8}``), arithmetic (``$((NODES * 8))``), arrays spread into the
command (``"${ARGS[@]}"``), files ``source``d relative to the script (slime's
``scripts/models/*.sh``), ``export`` and ``\\`` continuations. :func:`commands`
evaluates those and returns every command the script runs, its words expanded.

Why a small evaluator and not a parser library: ``bashlex`` (the one kept
Python parser of bash) builds a syntax tree but rejects array assignments
(``ARGS=( ... )``), the construct every slime and most veRL scripts are built
on, and evaluates nothing; the expansion rules (defaults, arrays, arithmetic,
word splitting, quoting) would have to be written on top of it anyway.
``shlex`` splits words but not ``$(...)`` spans or arrays. What is evaluated
here is the subset those scripts use; the rest is handled as follows:

* A variable no line assigns (``$HOME``, ``$PWD``, ``$DATA_DIR`` from the
  environment) stays in the words as written (``${HOME}``) and is listed in
  :attr:`Script.unresolved`: paths and names need no value; a cost setting
  that reads one is refused by the importer naming the variable.
* ``$(...)`` runs ``cd``, ``pwd``, ``dirname``, ``basename``, ``realpath``,
  ``echo`` and ``printf``; any other program's output (``nvidia-smi``,
  ``date``) is unknown and handled like an unassigned variable.
* ``if``/``elif`` test ``[ ]``, ``[[ ]]`` and ``test`` on known strings and
  numbers; a test the reader cannot decide takes its first branch (the
  script's default path) and is listed in :attr:`Script.notes`. ``for`` runs
  its body once with the first item; ``while``/``until``/``case`` bodies are
  skipped (listed in notes). Functions run when called. Positional
  parameters (``$1``, ``"$@"``) are empty: the script runs without arguments.
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import os
import re

from export._src import shell_lex
from export._src.shell_expand import ASSIGN
from export._src.shell_expand import NAME
from export._src.shell_expand import Expander
from export._src.shell_expand import Unknown
from export._src.shell_expand import arith_eval

_REDIRECT = re.compile(r"^(\d*|&)(>>?|<)(&\d*)?$|^(\d*|&)(>>?|<)(&\d*|.+)$")
_SKIP = ("while", "until")
_MAX_LOOP = 100_000  # iterations of one C-style for loop
_BUILTINASSIGN = ("export", "declare", "local", "readonly", "typeset")


@dataclasses.dataclass
class Script:
  """What a run of the script showed: its commands' words, the variables at the end, the
  variables it reads but never assigns, and the constructs it could not decide."""

  commands: list[list[str]]
  variables: dict
  unresolved: set
  notes: list[str]


class Shell(Expander):
  """One script's run: its statements (blocks, if, case, for, functions, commands, source)."""

  def run(self, text: str):
    cmds = shell_lex.simple_commands(shell_lex.tokens(text))
    self.block(cmds, 0, len(cmds))

  def block(self, cmds, i, stop):
    while i < stop and not self.exited:
      words, op = cmds[i]
      if not words:
        i += 1
        continue
      head = words[0]
      if head in ("then", "do", "else", "{", "}", "!") and len(words) > 1:
        cmds = cmds[:i] + [(words[1:], op)] + cmds[i + 1:]
        stop += 0
        continue
      if head in ("then", "do", "else", "{", "}", "fi", "done", "esac") and len(words) == 1:
        i += 1
        continue
      if head == "if":
        i = self.run_if(cmds, i, stop)
        continue
      if head == "for":
        i = self.run_for(cmds, i, stop)
        continue
      if head in _SKIP:
        end = self.match(cmds, i, stop, head)
        self.notes.append(f"a '{head}' block is not run")
        i = end + 1
        continue
      if head == "case":
        i = self.run_case(cmds, i, stop)
        continue
      if head == "function" or (head.endswith("()") and NAME.fullmatch(head[:-2])):
        i = self.define(cmds, i, stop)
        continue
      result = self.simple(words)
      # `a && b`: b runs only when a succeeded; `a || b`: only when a failed
      while op in ("&&", "||") and i + 1 < stop:
        if (op == "&&") != (result is not False):
          i += 1
          op = cmds[i][1]
          continue
        break
      i += 1

  def match(self, cmds, i, stop, head) -> int:
    """Index of the ``fi``/``done``/``esac`` closing the block opened at ``cmds[i]``."""
    closers = {"if": "fi", "for": "done", "while": "done", "until": "done", "case": "esac"}
    depth = 0
    for k in range(i, stop):
      w = cmds[k][0]
      for x in (w[:1] + [y for y in w[1:] if y in ("fi", "done", "esac")]):
        if x in closers:
          depth += 1
        elif x in ("fi", "done", "esac"):
          depth -= 1
          if depth == 0:
            return k
    raise ValueError(f"shell: '{head}' at command {' '.join(cmds[i][0])!r} has no closing word")

  def run_if(self, cmds, i, stop) -> int:
    end = self.match(cmds, i, stop, "if")
    branches, depth = [], 0  # (condition commands or None, body start, body end)
    cond_start, body_start, is_else = i, None, False
    for j in range(i, end + 1):
      w = cmds[j][0]
      h = w[0] if w else ""
      if j > i and h in ("if", "for", "while", "until", "case"):
        depth += 1
      if h in ("fi", "done", "esac") and j != end:
        depth -= 1
      if depth:
        continue
      if h in ("elif", "else") or j == end:
        branches.append((None if is_else else (cond_start, body_start), body_start, j))
        cond_start, is_else = j, h == "else"
        body_start = j + (0 if h == "else" and len(w) > 1 else 1) if h == "else" else None
      elif h == "then" and body_start is None:
        body_start = j
    for cond, b0, b1 in branches:
      if b0 is None:
        continue
      if cond is None:
        self.block(cmds, b0, b1)
        break
      c0, _ = cond
      cw = [(list(cmds[c0][0][1:]), cmds[c0][1])] + list(cmds[c0 + 1:b0])
      ok = self.condition(cw)
      if ok is None and any(w[:1] == ["exit"] for w, _ in cmds[b0:b1]):
        ok = False  # an undecided test guarding an exit: the run goes on (the script's path)
        self.notes.append(f"the test {' '.join(cw[0][0])!r} is undecided: its exit is skipped")
      elif ok is None:
        self.notes.append(f"the test {' '.join(cw[0][0])!r} is undecided: its branch is taken")
      if ok is not False:
        self.block(cmds, b0, b1)
        break
    return end + 1

  def define(self, cmds, i, stop) -> int:
    """Stores the function defined at ``cmds[i]`` (``f() {``, ``function f {``)."""
    words = cmds[i][0]
    name = (words[1] if words[0] == "function" else words[0]).removesuffix("()")
    body, depth, k = [], 0, i
    rest = words[2:] if words[0] == "function" else words[1:]
    while k < stop:
      ws = rest if k == i else cmds[k][0]
      depth += ws.count("{")
      closing = ws.count("}")
      kept = [w for w in ws if w not in ("{", "}")]
      if kept:
        body.append((kept, cmds[k][1]))
      depth -= closing
      if depth <= 0 and (closing or (k > i and "{" in ws)):
        break
      k += 1
    self.funcs[name] = body
    return k + 1

  def run_case(self, cmds, i, stop) -> int:
    """``case WORD in pat|pat) ... ;; esac``: the first clause whose pattern matches."""
    end = self.match(cmds, i, stop, "case")
    value = self.expand_joined(cmds[i][0][1])
    k, depth, clauses, pats, body = i + 1, 0, [], [], None
    while k < end:
      ws, op = cmds[k]
      if body is None:
        pats.append(ws[0].lstrip("("))
        if not ws[0].endswith(")"):
          k += 1
          continue
        pats[-1] = pats[-1][:-1]
        body = [(ws[1:], op)] if ws[1:] else []
        if op == ";;":
          clauses.append((pats, body))
          pats, body = [], None
        k += 1
        continue
      h = ws[0] if ws else ""
      depth += h in ("if", "for", "while", "until", "case")
      depth -= h in ("fi", "done", "esac")
      body.append((ws, op))
      if op == ";;" and depth == 0:
        clauses.append((pats, body))
        pats, body = [], None
      k += 1
    if body is not None:
      clauses.append((pats, body))
    if isinstance(value, Unknown):  # the default clause, else the first, that does not exit
      going = [c for c in clauses if not any(w[:1] == ["exit"] for w, _ in c[1])] or clauses
      clauses = [c for c in going if "*" in c[0]] or going[:1]
    for pats, body in clauses:
      hit = None if isinstance(value, Unknown) else any(
          fnmatch.fnmatchcase(value, self.expand_joined(p)) for p in pats)
      if hit is None:
        self.notes.append(f"'case {cmds[i][0][1]}' is undecided: its default clause is taken")
      if hit is not False:
        self.block(body, 0, len(body))
        break
    return end + 1

  def run_for(self, cmds, i, stop) -> int:
    end = self.match(cmds, i, stop, "for")
    w = cmds[i][0]
    body = next(k for k in range(i, end) if cmds[k][0][:1] == ["do"])
    if len(w) > 1 and w[1].startswith("(("):  # for ((init; test; step))
      parts = w[1][2:-2].split(";")
      if len(parts) != 3:
        raise ValueError(f"shell: {w[1]!r} is not 'for ((init; test; step))'")
      self.simple([f"(({parts[0]}))"])
      for _ in range(_MAX_LOOP):
        go = self.arith(parts[1])
        if not go:
          if go is None:
            self.notes.append(f"'for {w[1]}' stops at a test it cannot decide")
          break
        self.block(cmds, body, end)
        self.simple([f"(({parts[2]}))"])
      return end + 1
    items = [x for raw in w[3:] for x in self.expand(raw)] if len(w) > 3 and w[2] == "in" else []
    if items:
      self.vars[w[1]] = items[0]
      if len(items) > 1:
        self.notes.append(f"'for {w[1]}' runs once, with {w[1]}={items[0]!r}")
      self.block(cmds, body, end)
    return end + 1

  def simple(self, raw_words) -> bool | None:
    """Runs one simple command; returns whether it succeeded (None: unknown)."""
    head = raw_words[0]
    if head.startswith("((") and head.endswith("))"):
      expr = head[2:-2]
      m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(\+\+|--|[-+*/]?=)\s*(.*)", expr)
      if m:
        cur = self.arith(m.group(1)) or 0
        rhs = 1 if m.group(2) in ("++", "--") else self.arith(m.group(3))
        if rhs is not None:
          op = m.group(2)[0]
          self.vars[m.group(1)] = str(rhs if op == "=" else arith_eval(
              ast.parse(f"{cur}{'+' if op == '+' else '-' if op == '-' else op}{rhs}",
                        mode="eval").body, {}))
      return None
    # leading NAME=value words
    k = 0
    while k < len(raw_words) and ASSIGN.fullmatch(raw_words[k]):
      self.assign(raw_words[k])
      k += 1
    if k == len(raw_words):
      return True
    words = []
    skip = False
    for raw in raw_words[k:]:
      if skip:
        skip = False
        continue
      r = _REDIRECT.match(raw)
      if r:
        skip = r.group(2) is not None and r.group(3) is None and r.group(6) is None
        continue
      words.extend(self.expand(raw))
    if not words:
      return True
    cmd = words[0]
    if cmd in _BUILTINASSIGN:
      for raw in raw_words[k + 1:]:
        if ASSIGN.fullmatch(raw):
          self.assign(raw)
      return True
    if cmd == "printf" and len(words) > 3 and words[1] == "-v":
      fmt, args = words[3], words[4:]
      out = re.sub(r"%[sd]", lambda m: str(args.pop(0)) if args else "", fmt)
      self.vars[words[2]] = out
      return True
    if cmd == "unset":
      for w in words[1:]:
        self.vars.pop(w, None)
      return True
    inner = next((k for k in range(len(words) - 2)
                  if words[k] in ("bash", "sh") and words[k + 1] == "-c"), None)
    if inner is not None:  # [srun ...] bash -c "script": the script's commands
      self.run(words[inner + 2])
      return None
    if cmd in ("source", "."):
      return self.source(words[1] if len(words) > 1 else "")
    if cmd == "exit" and self.out is None:
      self.exited = True
      return True
    if cmd in self.funcs:
      body = self.funcs[cmd]
      saved = {str(d): self.vars.get(str(d)) for d in range(1, 10)}
      self.block(body, 0, len(body))
      self.vars.update({d: v for d, v in saved.items() if v is not None})
      return None
    if cmd == "cd" and len(words) > 1:
      target = words[-1]
      self.cwd = None if isinstance(target, Unknown) else os.path.join(self.cwd or "", target)
      return True
    if self.out is not None:
      if cmd == "pwd":
        self.emit(self.cwd if self.cwd else Unknown("$(pwd)"))
      elif cmd in ("echo", "printf"):
        self.emit(" ".join(w for w in words[1:] if not w.startswith("-")))
      elif cmd in ("dirname", "basename", "realpath", "readlink"):
        arg = [w for w in words[1:] if not w.startswith("-")]
        p = arg[0] if arg else Unknown("")
        f = {"dirname": os.path.dirname, "basename": os.path.basename}.get(cmd, lambda x: x)
        self.emit(p if isinstance(p, Unknown) else f(p))
      elif cmd not in ("true", ":", "set"):
        self.out_unknown = True
      return None
    self.commands.append(words)
    return None if cmd not in ("true", ":", "set", "echo", "export") else True

  def emit(self, s):
    if isinstance(s, Unknown):
      self.out_unknown = True
    self.out.append(s)

  def source(self, target) -> bool | None:
    if isinstance(target, Unknown) or not target:
      self.notes.append(f"'source {target}' names a file the script does not locate")
      return None
    here = os.path.dirname(self.source_stack[-1])
    path = target if os.path.isabs(target) else os.path.normpath(os.path.join(here, target))
    while not os.path.isfile(path) and not os.path.isabs(target) and here != os.path.dirname(here):
      here = os.path.dirname(here)  # scripts run from their repository's root
      path = os.path.normpath(os.path.join(here, target))
    if not os.path.isfile(path):
      self.notes.append(f"'source {target}': no such file next to the script")
      return False
    with open(path, encoding="utf-8") as f:
      text = f.read()
    self.source_stack.append(path)
    try:
      self.run(text)
    finally:
      self.source_stack.pop()
    return True


def read_script(path: str, env: dict | None = None) -> Script:
  """Runs the launch script at ``path`` as described in the module docstring."""
  sh = Shell(path, env)
  with open(path, encoding="utf-8") as f:
    sh.run(f.read())
  return Script(sh.commands, sh.vars, sh.unresolved, sh.notes)


def command(path: str, is_marker, what: str) -> tuple[str, list[str], Script]:
  """The first word ``is_marker`` accepts in the commands of the script at ``path``, the
  words after it, and the run; ValueError naming ``what`` if no command holds one."""
  script = read_script(path)
  for words in script.commands:
    for k, w in enumerate(words):
      if is_marker(w):
        return w, words[k + 1:], script
  raise ValueError(f"{os.path.basename(path)}: the script runs no {what} command")
