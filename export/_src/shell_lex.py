"""The words and operators of a bash script, as written: the lexer of :mod:`shell`.

Quotes, ``$(...)``, ``${...}``, backquotes and array values ``=( ... )`` stay
inside their word (comments inside an array's parentheses are dropped);
``\\`` line continuations join lines; operators (``;``, ``&&``, ``||``, ``|``,
``&``, ``;;``, newlines) separate commands.
"""

from __future__ import annotations

_OPS = ("&&", "||", ";;", ";", "|", "&", "\n")


def span(text: str, i: int, open_: str, close: str) -> int:
  """Index just past the ``close`` matching the ``open_`` at ``text[i]`` (quotes respected)."""
  depth, j = 0, i
  while j < len(text):
    c = text[j]
    if c == "\\":
      j += 2
      continue
    if c == "#" and open_ == "(" and text[j - 1] in " \t\n(":
      j = text.find("\n", j)
      j = len(text) - 1 if j < 0 else j
    elif c == "'":
      j = text.find("'", j + 1)
      if j < 0:
        raise ValueError(f"shell: unterminated ' in {text[i:i + 60]!r}")
    elif c == '"':
      j = dquote_end(text, j)
    elif c == "$" and text[j + 1:j + 2] in ("(", "{"):
      j = span(text, j + 1, text[j + 1], ")" if text[j + 1] == "(" else "}") - 1
    elif c == "`":
      j = text.find("`", j + 1)
    elif c == open_:
      depth += 1
    elif c == close:
      depth -= 1
      if depth == 0:
        return j + 1
    j += 1
  raise ValueError(f"shell: unterminated {open_!r} in {text[i:i + 60]!r}")


def dquote_end(text: str, i: int) -> int:
  """Index of the ``"`` closing the one at ``text[i]``."""
  j = i + 1
  while j < len(text):
    c = text[j]
    if c == "\\":
      j += 2
      continue
    if c == "$" and text[j + 1:j + 2] in ("(", "{"):
      j = span(text, j + 1, text[j + 1], ")" if text[j + 1] == "(" else "}")
      continue
    if c == "`":
      j = text.find("`", j + 1) + 1
      continue
    if c == '"':
      return j
    j += 1
  raise ValueError(f"shell: unterminated \" in {text[i:i + 60]!r}")


def tokens(text: str) -> list[tuple[str, str]]:
  """``("w", raw word)`` and ``("op", operator)`` tokens of ``text``; quotes, ``$(...)``,
  ``${...}`` and array values ``=( ... )`` stay inside their word, as written."""
  out: list[tuple[str, str]] = []
  word: list[str] = []
  i, n = 0, len(text)

  def end():
    if word:
      out.append(("w", "".join(word)))
      word.clear()

  while i < n:
    c = text[i]
    if c == "\\" and text[i + 1:i + 2] == "\n":
      i += 2
      continue
    if c == "\\":
      word.append(text[i:i + 2])
      i += 2
    elif c == "'":
      j = text.find("'", i + 1)
      if j < 0:
        raise ValueError(f"shell: unterminated ' in {text[i:i + 60]!r}")
      word.append(text[i:j + 1])
      i = j + 1
    elif c == '"':
      j = dquote_end(text, i)
      word.append(text[i:j + 1])
      i = j + 1
    elif c == "`":
      j = text.find("`", i + 1)
      word.append(text[i:j + 1])
      i = j + 1
    elif c == "$" and text[i + 1:i + 2] in ("(", "{"):
      j = span(text, i + 1, text[i + 1], ")" if text[i + 1] == "(" else "}")
      word.append(text[i:j])
      i = j
    elif c == "(" and word and "".join(word).endswith("="):
      j = span(text, i, "(", ")")
      word.append(text[i:j])
      i = j
    elif c == "#" and not word:
      i = text.find("\n", i)
      i = n if i < 0 else i
    elif c in " \t\r":
      end()
      i += 1
    elif c in "<>" :
      word.append(c)
      i += 1
    elif c == "&" and (text[i + 1:i + 2] == ">" or (word and word[-1] in "<>")):
      word.append(c)
      i += 1
    elif c in ";|&\n":
      end()
      op = next(o for o in _OPS if text.startswith(o, i))
      out.append(("op", op))
      i += len(op)
    elif c == "(" and text[i:i + 2] == "()" and word:
      word.append("()")
      i += 2
    elif c in "()" and not word:
      if text[i:i + 2] == "((":  # (( arithmetic )) command
        j = span(text, i, "(", ")")
        out.append(("w", text[i:j]))
        i = j
        continue
      out.append(("op", c))
      i += 1
    else:
      word.append(c)
      i += 1
  end()
  return out


def simple_commands(toks: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
  """Tokens grouped as ``(raw words, operator after)``; grouping parentheses dropped."""
  out, cur = [], []
  for kind, v in toks:
    if kind == "w":
      cur.append(v)
    elif v in "()":
      continue
    else:
      if cur or v not in ("\n", ";"):
        out.append((cur, v))
      cur = []
  if cur:
    out.append((cur, "\n"))
  return out
