"""The layers of fusegrad (DESIGN.md): imports go one way, down LAYERS, with no cycle, and a function-local import
only for an optional dependency or the lazy device registry. Reads the sources (ast); imports nothing."""
import ast, pathlib
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "fusegrad"

# lowest first: a module may import modules of its own layer (without a cycle) and of the layers before it
LAYERS: list[tuple[str, ...]] = [
  ("fusegrad.helpers",),
  ("fusegrad.dtype",),
  ("fusegrad.uop",),
  ("fusegrad.renderer",),
  ("fusegrad.codegen",),
  ("fusegrad.device", "fusegrad.runtime"),
  ("fusegrad.engine",),
  ("fusegrad.gradient", "fusegrad.mixin", "fusegrad.tensor", "fusegrad.jit"),
  ("fusegrad.nn",),
  ("fusegrad",),  # the public names (__init__.py)
]

# (importing module, imported module) pairs allowed inside a function, and why
LOCAL_IMPORTS: dict[tuple[str, str], str] = {
  ("fusegrad.device", "fusegrad.runtime"): "the lazy device registry: Device['X'] imports runtime/ops_x.py",
}
# modules a function may import: optional dependencies (pyproject.toml's extras) and numpy, which fusegrad needs only
# when asked for arrays (importing it costs more than the rest of fusegrad)
OPTIONAL = {"numpy", "onnx", "mpi4py", "wgpu"}

def module_name(path: pathlib.Path) -> str:
  parts = path.relative_to(ROOT.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

def layer_of(module: str) -> int:
  """The index of the layer a module belongs to (the longest matching prefix)."""
  best = max((len(p), i) for i, layer in enumerate(LAYERS) for p in layer if module == p or module.startswith(p + "."))
  return best[1]

def imports_of(path: pathlib.Path) -> list[tuple[str, int, bool]]:
  """(imported module, line, inside a function) for each import in a file; `if TYPE_CHECKING:` blocks don't count."""
  tree, out = ast.parse(path.read_text()), []
  def visit(node: ast.AST, local: bool) -> None:
    for child in ast.iter_child_nodes(node):
      if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test): continue
      if isinstance(child, ast.Import): out.extend((a.name, child.lineno, local) for a in child.names)
      elif isinstance(child, ast.ImportFrom):
        assert child.level == 0, f"{path}:{child.lineno}: a relative import (fusegrad imports by absolute names)"
        base = child.module or ""
        # `from fusegrad.engine import state` imports the module fusegrad.engine.state
        subs = [f"{base}.{a.name}" for a in child.names if (ROOT.parent / f"{base}.{a.name}".replace(".", "/")).exists()
                or (ROOT.parent / (f"{base}.{a.name}".replace(".", "/") + ".py")).exists()]
        out.extend((m, child.lineno, local) for m in (subs or [base]))
      visit(child, local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
  visit(tree, False)
  return out

GRAPH = {module_name(p): imports_of(p) for p in sorted(ROOT.rglob("*.py"))}

def test_every_module_has_a_layer():
  for m in GRAPH: layer_of(m)

def test_imports_go_down_the_layers():
  bad = [f"{m}:{line} imports {dep} (layer {LAYERS[layer_of(dep)][0]} is above {LAYERS[layer_of(m)][0]})"
         for m, deps in GRAPH.items() for dep, line, _ in deps
         if dep.startswith("fusegrad") and layer_of(dep) > layer_of(m)]
  assert not bad, "\n".join(bad)

def test_function_local_imports_are_listed():
  bad = [f"{m}:{line} imports {dep} inside a function" for m, deps in GRAPH.items() for dep, line, local in deps
         if local and (m, dep.rpartition(".")[0] if dep.startswith("fusegrad.runtime.") else dep) not in LOCAL_IMPORTS
         and not (not dep.startswith("fusegrad") and dep.split(".")[0] in OPTIONAL)]
  assert not bad, "\n".join(bad)

def test_no_cycles():
  """A depth-first walk of the import graph (function-local imports included) finds no module on its own path."""
  edges = {m: sorted({d for d, _, _ in deps if d in GRAPH and d != m}) for m, deps in GRAPH.items()}
  state: dict[str, int] = {}  # 1: on the current path, 2: done
  def walk(m: str, path: list[str]) -> None:
    state[m] = 1
    for d in edges[m]:
      if state.get(d) == 1: pytest.fail("import cycle: " + " -> ".join((path + [m])[(path + [m]).index(d):] + [d]))
      if d not in state: walk(d, path + [m])
    state[m] = 2
  for m in edges:
    if m not in state: walk(m, [])
