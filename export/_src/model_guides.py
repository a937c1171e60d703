"""A model path that is an instruction pointing at a guide of the framework's own repository.

Some shipped configs set the model path to a sentence such as ``Follow instructions in
https://github.com/<owner>/<repo>/blob/<ref>/docs/guides/<guide>.md`` (the guide
converts a checkpoint). Where the link points into the framework's own repository and
the config file sits inside a checkout of it (the nearest folder above the config
holding the linked path is taken as the checkout's root), the guide is read: if the
Hugging Face ids it links to (``huggingface.co/<org>/<name>``) are exactly one id and
the model table knows it, that is the model, and the import says so. Anything else
(no such link, no checkout around the config, no id, several ids, an id the table
lacks) is left to the caller, which refuses the path as an instruction.
"""

from __future__ import annotations

import os
import re

import costmodel as cm

_LINK = re.compile(r"https?://github\.com/([\w.-]+/[\w.-]+)/blob/[^/\s]+/([^\s#?)\"']+)")
_HF_ID = re.compile(r"huggingface\.co/([\w.-]+/[\w.-]+)")
# huggingface.co paths that are not model repositories
_NOT_MODELS = frozenset({"datasets", "spaces", "docs", "blog", "papers", "collections"})


def _checkout_file(config_file: str, rel: str) -> str | None:
  """``rel`` under the nearest folder above ``config_file`` that holds it, or None."""
  d = os.path.dirname(os.path.abspath(config_file))
  while True:
    candidate = os.path.join(d, rel)
    if os.path.isfile(candidate):
      return candidate
    parent = os.path.dirname(d)
    if parent == d:
      return None
    d = parent


def guide_ids(text: str) -> list[str]:
  """The Hugging Face model ids a guide links to, in order of first mention."""
  out = []
  for m in _HF_ID.finditer(text):
    hf_id = re.sub(r"\.git$", "", m.group(1).rstrip("."))
    if hf_id.split("/")[0].lower() not in _NOT_MODELS and hf_id not in out:
      out.append(hf_id)
  return out


def guided_model(path_value, config_file: str | None, repository: str,
                 notes: list[str]) -> cm.ModelSpec | None:
  """The model the linked guide names (see the module), noted in ``notes``; else None.

  ``repository`` is the framework's own ``owner/name`` on GitHub.
  """
  if not isinstance(path_value, str) or not config_file:
    return None
  m = _LINK.search(path_value)
  if m is None or m.group(1).lower() != repository.lower():
    return None
  rel = m.group(2).rstrip(".,;:")
  guide = _checkout_file(config_file, rel)
  if guide is None:
    return None
  with open(guide, encoding="utf-8") as f:
    ids = guide_ids(f.read())
  if len(ids) != 1:
    return None
  try:
    spec = cm.models.from_hf_id(ids[0])
  except ValueError:
    return None
  notes.append(f"model path is an instruction; the guide {rel} names {ids[0]}")
  return spec
