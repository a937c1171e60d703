"""Expansion of the words of a launch script: parameters, arithmetic, command substitution.

:class:`Expander` holds a script run's state (variables, functions, working directory, what
it has run) and expands words as bash does for the subset the frameworks' launch scripts
use (see :mod:`export._src.shell` for that subset and what happens outside it). Running
the statements themselves is :class:`export._src.shell.Shell`, which extends it.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re

from export._src import shell_lex

NAME = re.compile(r"[A-Za-z_]\w*")
ASSIGN = re.compile(r"([A-Za-z_]\w*)(\[[^\]]*\])?(\+?)=(.*)", re.S)


class Unknown(str):
  """A word part whose value the script does not give (kept as written)."""


class Expander:
  """A script run's state and the expansion of its words; :meth:`run` is the subclass's."""


  def __init__(self, path: str, env: dict | None = None):
    self.path = os.path.abspath(path)
    self.vars: dict = dict(env or {})
    self.funcs: dict = {}
    self.cwd: str | None = None
    self.commands: list[list[str]] = []
    self.unresolved: set = set()
    self.notes: list[str] = []
    self.source_stack = [self.path]
    self.out: list[str] | None = None  # stdout being captured by $(...)
    self.out_unknown = False
    self.exited = False

  # ----- expansion -----------------------------------------------------------------------

  def lookup(self, name: str):
    if name in self.vars:
      return self.vars[name]
    if name == "BASH_SOURCE":
      return list(reversed(self.source_stack))
    if name == "0":
      return self.path
    if name in ("@", "*") or name.isdigit():
      return []
    if name == "#":
      return "0"
    return None

  def param(self, body: str):
    """The value of ``${body}``: a str, a list (arrays with ``[@]``) or :class:`Unknown`."""
    if body.startswith("#") and len(body) > 1:
      v = self.param(body[1:])
      return Unknown(f"${{{body}}}") if isinstance(v, Unknown) else str(
          len(v) if isinstance(v, list) else len(v))
    m = re.match(r"([A-Za-z_]\w*|[@*#?$!0-9])(\[([^\]]*)\])?", body)
    if not m:
      raise ValueError(f"shell: ${{{body}}} is not a parameter expansion this reader knows")
    name, index, rest = m.group(1), m.group(3), body[m.end():]
    v = self.lookup(name)
    if v is not None and index is not None:
      if index == "@":
        v = v if isinstance(v, list) else [v]
      elif index == "*":  # one word, joined by the first character of IFS
        sep = str(self.vars.get("IFS", " "))[:1]
        v = sep.join(v) if isinstance(v, list) else v
      else:
        items = v if isinstance(v, list) else [v]
        k = self.arith(index)
        v = items[k] if isinstance(k, int) and -len(items) <= k < len(items) else ""
    elif isinstance(v, list) and index is None and name not in ("@", "*"):
      v = v[0] if v else ""
    op = re.match(r":?[-=+?]|%%|%|##|#|//|/|,,|\^\^|:", rest)
    if not op:
      if rest:
        raise ValueError(f"shell: ${{{body}}} is not a parameter expansion this reader knows")
      if v is None:
        self.unresolved.add(name)
        return Unknown(f"${{{body}}}")
      return v
    o, arg = op.group(0), rest[op.end():]
    empty = v is None or (o.startswith(":") and v in ("", []))
    if o in (":-", "-", ":=", "="):
      if not empty:
        return v
      d = self.expand_joined(arg)
      if v is None and d == "":  # ${X:-}: empty here, X may come from the environment
        self.unresolved.add(name)
        d = Unknown("")
      if o.endswith("="):
        self.vars[name] = d
      return d
    if o in (":+", "+"):
      return "" if empty else self.expand_joined(arg)
    if o in (":?", "?"):
      return v if not empty else Unknown(f"${{{body}}}")
    if v is None:
      self.unresolved.add(name)
      return Unknown(f"${{{body}}}")
    s = " ".join(v) if isinstance(v, list) else v
    if o in ("%", "%%", "#", "##"):
      pat = self.expand_joined(arg)
      cuts = range(len(s) + 1)
      if o.startswith("%"):
        cands = [k for k in cuts if fnmatch.fnmatchcase(s[k:], pat)]
        k = (min(cands) if o == "%%" else max(cands)) if cands else len(s)
        return s[:k]
      cands = [k for k in cuts if fnmatch.fnmatchcase(s[:k], pat)]
      k = (max(cands) if o == "##" else min(cands)) if cands else 0
      return s[k:]
    if o in ("/", "//"):
      pat, _, rep = arg.partition("/")
      return s.replace(self.expand_joined(pat), self.expand_joined(rep), -1 if o == "//" else 1)
    if o == ",,":
      return s.lower()
    if o == "^^":
      return s.upper()
    off, _, ln = arg.partition(":")  # ${X:offset:length}
    a = self.arith(off)
    b = self.arith(ln) if ln else None
    if not isinstance(a, int) or (ln and not isinstance(b, int)):
      return Unknown(f"${{{body}}}")
    return s[a:] if b is None else s[a:a + b]

  def arith(self, expr: str):
    """``$(( expr ))``: an int, or None when a name in it has no known integer value."""
    text = self.expand_joined(expr.replace("$((", "(").replace("))", ")"), quoted=True)
    if isinstance(text, Unknown) or "${" in text:
      return None
    env = {}
    for name in set(NAME.findall(text)):
      v = self.lookup(name)
      v = v[0] if isinstance(v, list) and v else v
      try:
        env[name] = int(str(v).strip()) if v not in (None, "") else 0
      except ValueError:
        return None
    try:
      tree = ast.parse(text.replace("&&", " and ").replace("||", " or ").strip(), mode="eval")
    except SyntaxError:
      return None
    return arith_eval(tree.body, env)

  def expand_joined(self, raw: str, quoted: bool = False) -> str:
    """``raw`` expanded as one string (an assignment's value, a default)."""
    fields = self.expand(raw, split=False)
    s = " ".join(fields)
    return Unknown(s) if any(isinstance(f, Unknown) for f in fields) else s

  def expand(self, raw: str, split: bool = True) -> list[str]:
    """The words ``raw`` expands to: quotes removed, parameters, arithmetic and ``$(...)``
    substituted, unquoted results split on blanks and ``"${A[@]}"`` one word per item."""
    fields: list[list] = [[]]
    has = [False]
    unknown = [False]

    def put(s, quoted):
      if isinstance(s, Unknown):
        unknown[0] = True
      if isinstance(s, list):
        for k, item in enumerate(s):
          if k:
            fields.append([])
          put(item, quoted)
        return
      # one unknown construct ($X, ${...}, $(...)) stays one word, whatever it holds
      whole = isinstance(s, Unknown) and re.fullmatch(r"\$(\w+|\{.*\}|\(.*\))", s, re.S)
      if quoted or not split or whole:  # an unknown value stays one word
        fields[-1].append(s)
        has[0] = True
        return
      # a value composed around unknown parts splits on its own blanks; each part that
      # holds an unknown stays unknown
      parts = re.split(r"[ \t\n]+", s)
      for k, p in enumerate(parts):
        if k and fields[-1]:
          fields.append([])
        if p:
          fields[-1].append(Unknown(p) if isinstance(s, Unknown) and "$" in p else p)
          has[0] = True

    def dollar(text, i, quoted):
      """Expands the ``$`` construct at ``text[i]``; returns the index after it."""
      nxt = text[i + 1:i + 2]
      if text.startswith("$((", i):
        j = shell_lex.span(text, i + 1, "(", ")")
        v = self.arith(text[i + 3:j - 2])
        put(str(v) if v is not None else Unknown(text[i:j]), True)
        return j
      if nxt == "(":
        j = shell_lex.span(text, i + 1, "(", ")")
        put(self.substitute(text[i + 2:j - 1]), quoted)
        return j
      if nxt == "{":
        j = shell_lex.span(text, i + 1, "{", "}")
        put(self.param(text[i + 2:j - 1]), quoted)
        return j
      m = re.match(r"[A-Za-z_]\w*|[@*#?$!0-9]", text[i + 1:])
      if not m:
        put("$", quoted)
        return i + 1
      put(self.param(m.group(0)), quoted)
      return i + 1 + m.end()

    i = 0
    while i < len(raw):
      c = raw[i]
      if c == "'":
        j = raw.index("'", i + 1)
        put(raw[i + 1:j], True)
        i = j + 1
      elif c == '"':
        j = shell_lex.dquote_end(raw, i)
        inner, k = raw[i + 1:j], 0
        has[0] = True
        buf = []
        while k < len(inner):
          if inner[k] == "\\" and inner[k + 1:k + 2] == "\n":  # a line continuation
            k += 2
          elif inner[k] == "\\" and inner[k + 1:k + 2] in ('"', "\\", "$", "`"):
            buf.append(inner[k + 1])
            k += 2
          elif inner[k] == "$":
            put("".join(buf), True)
            buf = []
            k = dollar(inner, k, True)
          elif inner[k] == "`":
            e = inner.index("`", k + 1)
            put("".join(buf), True)
            buf = []
            put(self.substitute(inner[k + 1:e]), True)
            k = e + 1
          else:
            buf.append(inner[k])
            k += 1
        put("".join(buf), True)
        i = j + 1
      elif c == "\\":
        put(raw[i + 1:i + 2], True)
        i += 2
      elif c == "$":
        i = dollar(raw, i, False)
      elif c == "`":
        j = raw.index("`", i + 1)
        put(self.substitute(raw[i + 1:j]), False)
        i = j + 1
      else:
        j = i
        while j < len(raw) and raw[j] not in "'\"\\$`":
          j += 1
        put(raw[i:j], True)
        i = j
    whole_array = re.fullmatch(r'"\$(@|\{(@|\w+\[@\])\})"', raw)
    if whole_array and len(fields) == 1 and not "".join(fields[0]):
      return []  # "$@" and "${A[@]}" of nothing are no word
    words = ["".join(f) for f in fields if f or has[0]]
    if unknown[0]:
      words = [Unknown(w) if "$" in w or w == "" else w for w in words]
    return words

  def substitute(self, inner: str):
    """The output of ``$(inner)`` (its trailing newlines cut) or :class:`Unknown`."""
    saved = (self.out, self.out_unknown, self.cwd, dict(self.vars))
    self.out, self.out_unknown = [], False
    try:
      self.run(inner)
      out = "\n".join(self.out).rstrip("\n")
      return Unknown(f"$({inner})") if self.out_unknown else out
    finally:  # a subshell's assignments stay in it
      self.out, self.out_unknown, self.cwd, self.vars = saved

  # ----- running ---------------------------------------------------------------------------


  def condition(self, cw) -> bool | None:
    """``a && b || c`` of tests, left to right; None when undecided."""
    result, op = None, None
    for words, nxt in cw:
      if not [w for w in words if w not in ("{", "}", "!")]:
        continue
      v = self.test(words)
      result = v if op not in ("&&", "||") else (
          (result and v) if op == "&&" and None not in (result, v) else
          (result or v) if op == "||" and None not in (result, v) else
          False if op == "&&" and False in (result, v) else
          True if op == "||" and True in (result, v) else None)
      op = nxt
    return result

  def test(self, words) -> bool | None:
    neg = words[0] == "!"
    words = words[1:] if neg else words
    if words and words[0] in ("{", "}"):
      words = [w for w in words if w not in ("{", "}")]
    if not words:
      return None
    if words[0].startswith("((") and words[0].endswith("))"):
      v = self.arith(words[0][2:-2])
      v = None if v is None else v != 0
    elif words[0] in ("[", "[[", "test"):
      args = [x for raw in words[1:] if raw not in ("]", "]]") for x in self.expand(raw, False)]
      v = test_words(args)
    else:
      v = None
    return None if v is None else (v != neg)

  def assign(self, raw: str):
    m = ASSIGN.fullmatch(raw)
    name, index, plus, value = m.groups()
    if value.startswith("(") and value.endswith(")"):
      items = [x for kind, w in shell_lex.tokens(value[1:-1]) if kind == "w"
               for x in self.expand(w)]
      old = self.vars.get(name, [])
      old = old if isinstance(old, list) else [old]
      self.vars[name] = old + items if plus else items
      return
    v = self.expand_joined(value)
    if index:
      items = self.vars.get(name, [])
      items = list(items) if isinstance(items, list) else [items]
      k = self.arith(index[1:-1])
      if isinstance(k, int):
        items.extend([""] * (k + 1 - len(items)))
        items[k] = v
      self.vars[name] = items
      return
    old = self.vars.get(name, "")
    old = old[0] if isinstance(old, list) and old else old
    self.vars[name] = (old + v) if plus and isinstance(old, str) else v
    if isinstance(v, Unknown) or (plus and isinstance(old, Unknown)):
      self.vars[name] = Unknown(self.vars[name])


def arith_eval(node, env):
  """An integer expression of ``$(( ))``: + - * / % ** and comparisons; None if unknown."""
  if isinstance(node, ast.Constant) and isinstance(node.value, int):
    return node.value
  if isinstance(node, ast.Name):
    return env.get(node.id, 0)
  if isinstance(node, ast.UnaryOp):
    v = arith_eval(node.operand, env)
    return None if v is None else -v if isinstance(node.op, ast.USub) else (
        int(not v) if isinstance(node.op, ast.Not) else v)
  if isinstance(node, ast.BinOp):
    a, b = arith_eval(node.left, env), arith_eval(node.right, env)
    if a is None or b is None:
      return None
    ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
           ast.Div: lambda: int(a / b) if b else None, ast.Mod: lambda: a % b if b else None,
           ast.Pow: lambda: a ** b, ast.FloorDiv: lambda: a // b if b else None}
    f = ops.get(type(node.op))
    return f() if f else None
  if isinstance(node, ast.Compare) and len(node.ops) == 1:
    a, b = arith_eval(node.left, env), arith_eval(node.comparators[0], env)
    if a is None or b is None:
      return None
    ops = {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b, ast.Eq: a == b,
           ast.NotEq: a != b}
    return int(ops[type(node.ops[0])]) if type(node.ops[0]) in ops else None
  if isinstance(node, ast.IfExp):
    c = arith_eval(node.test, env)
    return None if c is None else arith_eval(node.body if c else node.orelse, env)
  return None


def test_words(args) -> bool | None:
  if len(args) == 2 and args[0] in ("-z", "-n") and isinstance(args[1], Unknown):
    return args[0] == "-n"  # a variable from the environment is taken to be set
  if any(isinstance(a, Unknown) for a in args):
    return None
  if args[:1] == ["!"]:
    v = test_words(args[1:])
    return None if v is None else not v
  if len(args) == 1:
    return args[0] != ""
  if len(args) == 2 and args[0] in ("-z", "-n"):
    return (args[1] == "") == (args[0] == "-z")
  if len(args) == 3:
    a, op, b = args
    if op in ("=", "=="):
      return fnmatch.fnmatchcase(a, b)
    if op == "!=":
      return not fnmatch.fnmatchcase(a, b)
    ops = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__,
           "-gt": int.__gt__, "-ge": int.__ge__}
    if op in ops:
      try:
        return ops[op](int(a), int(b))
      except ValueError:
        return None
  return None
