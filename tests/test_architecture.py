"""Imports flow one way: search/_src on declared layers without cycles, no
private name crosses a module, and the search reads the cost model only
through its public packages (``costmodel``, ``costmodel.internal``)."""

import ast
import pathlib

import pytest

from search._src import LAYERS

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("costmodel", "search", "export")
# Where no module imports another's private name: the packages and their scripts.
SCRIPTS = ("benchmarks", "tools")


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(package: str) -> dict[str, ast.Module]:
  return {_module_name(p): ast.parse(p.read_text(), str(p))
          for p in sorted((ROOT / package).rglob("*.py"))}


def _imports(tree: ast.Module) -> list[tuple[str, tuple[str, ...], int]]:
  """``(module, names, line)`` of every import of ``tree`` (functions' too);
  ``names`` is empty for ``import module``. The packages import absolutely."""
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out += [(a.name, (), node.lineno) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      assert not node.level, f"line {node.lineno}: a relative import"
      out.append((node.module, tuple(a.name for a in node.names), node.lineno))
  return out


def _graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
  """Module -> the modules of ``modules`` it imports."""
  graph = {}
  for name, tree in modules.items():
    deps = set()
    for module, names, _ in _imports(tree):
      deps.update(m for m in (module, *(f"{module}.{n}" for n in names)) if m in modules)
    deps.discard(name)
    graph[name] = deps
  return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
  """One import cycle of ``graph`` (None if none)."""
  state, stack = {}, []

  def visit(v):
    state[v] = 1
    stack.append(v)
    for w in sorted(graph[v]):
      if state.get(w) == 1:
        return stack[stack.index(w):] + [w]
      if w not in state and (found := visit(w)):
        return found
    stack.pop()
    state[v] = 2
    return None

  for v in sorted(graph):
    if v not in state and (found := visit(v)):
      return found
  return None


def _layer_of(module: str) -> int | None:
  rest = module.removeprefix("search._src.")
  for k, layer in enumerate(LAYERS):
    if rest in layer or rest.split(".")[0] in layer:
      return k
  return None


def _search_graph():
  return _graph({n: t for n, t in _modules("search").items()
                 if n.startswith("search._src.") or n == "search._src"})


def test_cycle_finder_finds_a_cycle_and_only_a_cycle():
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_search_src_imports_hold_no_cycle():
  graph = _search_graph()
  assert len(graph) > 30
  assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_every_search_src_module_is_on_one_declared_layer():
  listed = [m for layer in LAYERS for m in layer]
  assert len(listed) == len(set(listed)), "a module is on two layers"
  graph = _search_graph()
  missing = sorted(m for m in graph if m != "search._src" and _layer_of(m) is None)
  assert not missing, f"modules on no layer of search._src.LAYERS: {missing}"


def test_search_src_imports_no_module_of_a_higher_layer():
  upward = []
  for module, deps in _search_graph().items():
    if module == "search._src":
      continue
    for dep in deps:
      if dep != "search._src" and _layer_of(dep) > _layer_of(module):
        upward.append(f"{module} (layer {_layer_of(module) + 1}) imports {dep} "
                      f"(layer {_layer_of(dep) + 1})")
  assert not upward, "\n".join(sorted(upward))


def _project_module(module: str) -> bool:
  return module.split(".")[0] in PACKAGES + SCRIPTS


@pytest.mark.parametrize("package", PACKAGES + SCRIPTS)
def test_no_private_name_crosses_a_module(package):
  crossing = []
  for name, tree in _modules(package).items():
    bound = {}  # local name -> project module it names
    for module, names, line in _imports(tree):
      if not _project_module(module):
        continue
      for n in names:
        if n.startswith("_") and not n.startswith("__"):
          crossing.append(f"{name}:{line}: from {module} import {n}")
        bound[n] = f"{module}.{n}"
    for node in ast.walk(tree):
      if isinstance(node, ast.alias) and not node.name.startswith("_"):
        bound.setdefault((node.asname or node.name).split(".")[0], node.name)
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in bound and _project_module(bound[node.value.id])
          and node.attr.startswith("_") and not node.attr.startswith("__")
          and node.attr != "_src"):
        crossing.append(f"{name}:{node.lineno}: {node.value.id}.{node.attr}")
  assert not crossing, "\n".join(crossing)


def test_search_reads_the_cost_model_through_its_public_packages():
  inside = []
  for name, tree in _modules("search").items():
    for module, names, line in _imports(tree):
      if module.startswith("costmodel._src") or (module == "costmodel" and "_src" in names):
        inside.append(f"{name}:{line}: {module}")
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and node.attr == "_src"
          and isinstance(node.value, ast.Name) and node.value.id in ("cm", "costmodel")):
        inside.append(f"{name}:{node.lineno}: {node.value.id}._src")
  assert not inside, "\n".join(inside)
