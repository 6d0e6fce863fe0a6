"""The documentation: every public name has a docstring whose first line summarises it, every public Tensor method is
on one page of the site's API, the examples in docstrings run (doctest's `>>>` ones, and the inline
"`expression` is value" ones) and give what they say, and every op has a runnable example: a doctest, or a block of
docs/examples/ that calls it (shown under its entry on the site, with its output)."""
import ast, doctest, importlib, importlib.util, inspect, json, math, os, pathlib, pkgutil, re, subprocess, sys
import pytest
import fusegrad
from fusegrad import Tensor, dtypes, nn
from fusegrad.nn import optim, state

ROOT = pathlib.Path(__file__).resolve().parent.parent

def _hooks():
  spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
  mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
  spec.loader.exec_module(mod)  # type: ignore[union-attr]
  return mod

def _unwrap(attr):
  if isinstance(attr, (staticmethod, classmethod)): return attr.__func__
  return attr.fget if isinstance(attr, property) else attr

def tensor_api() -> dict[str, object]:
  """The public Tensor methods and properties (class-level flags and data attributes aside)."""
  ret = {}
  for name in dir(Tensor):
    if name.startswith("_") and name not in ("__getitem__", "__setitem__"): continue
    attr = inspect.getattr_static(Tensor, name)
    if callable(attr) or isinstance(attr, (staticmethod, classmethod, property)): ret[name] = _unwrap(attr)
  return ret

def module_api(mod) -> dict[str, object]:
  """A module's public classes and functions defined in fusegrad, with the public methods those classes define."""
  names = getattr(mod, "__all__", [n for n in dir(mod) if not n.startswith("_")])
  ret = {}
  for name in names:
    obj = getattr(mod, name)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)) or obj.__module__ != mod.__name__: continue
    ret[f"{mod.__name__}.{name}"] = obj
    if inspect.isclass(obj):
      for m, attr in vars(obj).items():
        if not m.startswith("_") and (callable(attr) or isinstance(attr, (staticmethod, classmethod, property))):
          ret[f"{mod.__name__}.{name}.{m}"] = _unwrap(attr)
  return ret

def summary_problem(name: str, obj) -> str | None:
  """Why obj's docstring doesn't summarise it, or None: it has one, and its first line says something (a few words,
  more than the name)."""
  doc = inspect.getdoc(obj)
  if not doc or not doc.strip(): return "no docstring"
  first = doc.strip().splitlines()[0].strip()
  if len(first) < 10 or len(first.split()) < 2: return f"first line too short to summarise: {first!r}"
  if first.strip("`.():").lower() == name.split(".")[-1].lower(): return f"first line only repeats the name: {first!r}"
  return None

def test_public_names_have_summaries():
  api = {f"Tensor.{k}": v for k, v in tensor_api().items()}
  for mod in (nn, optim, state): api.update(module_api(mod))
  assert len(api) > 300  # the check sees the whole API (a broken listing would pass vacuously)
  problems = {name: p for name, obj in api.items() if (p := summary_problem(name, obj)) is not None}
  assert not problems, f"public names without a summarising docstring: {problems}"

def test_every_tensor_method_on_one_api_page():
  groups = _hooks().tensor_groups()
  placed = [n for members in groups.values() for n in members]
  assert sorted(set(placed)) == sorted(placed), "a method is on two pages"
  assert set(tensor_api()) <= set(placed), f"not on any API page: {set(tensor_api()) - set(placed)}"
  pages = {p.stem for p in (ROOT / "docs" / "tensor").glob("*.md")}
  assert set(groups) <= pages

def test_flag_table_needs_a_doc_line():
  from fusegrad.helpers import ContextVar
  hooks = _hooks()
  assert "| `VIZ_PORT` | `8000` |" in hooks.flag_table()
  flag = ContextVar("TEST_UNDOCUMENTED_FLAG", 0)
  try:
    with pytest.raises(ValueError, match="TEST_UNDOCUMENTED_FLAG"): hooks.flag_table()
  finally: del ContextVar._cache[flag.key]

# *** examples ***

def public_modules() -> list:
  mods = []
  for info in pkgutil.walk_packages(fusegrad.__path__, "fusegrad."):
    if info.name.endswith("__main__"): continue
    try: mods.append(importlib.import_module(info.name))
    except ImportError: pass  # an optional dependency (onnx) that isn't installed
  return mods

def test_doctests():
  flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
  finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=flags)
  globs = {"Tensor": Tensor, "dtypes": dtypes, "nn": nn}
  tests = [t for mod in public_modules() for t in finder.find(mod, globs={**vars(mod), **globs}) if t.examples]
  for t in tests: runner.run(t)
  result = runner.summarize(verbose=False)
  assert result.attempted >= 15, f"only {result.attempted} docstring examples found"
  assert result.failed == 0

INLINE = re.compile(r"`([^`]+)`\s+is\s+")

def _value_after(text: str) -> str:
  """The Python literal at the start of text: a bracketed one (brackets balanced) or a number, True or False."""
  if text[0] in "[(":
    depth = 0
    for i, c in enumerate(text):
      depth += c in "[(" and 1 or -(c in "])")
      if depth == 0: return text[:i + 1]
  return re.match(r"-?[\d.]+(e-?\d+)?|True|False", text).group(0).rstrip(".")  # type: ignore[union-attr]

def _plain(x):
  if isinstance(x, Tensor): return x.tolist()
  return [_plain(v) for v in x] if isinstance(x, (tuple, list)) else x

def _close(got, want) -> bool:
  if isinstance(want, (list, tuple)):
    return isinstance(got, (list, tuple)) and len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want))
  if isinstance(want, float): return math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-3)
  return got == want

def inline_examples() -> list[tuple[str, str, str]]:
  found = []
  for name, obj in tensor_api().items():
    doc = inspect.getdoc(obj) or ""
    for m in INLINE.finditer(doc):
      rest = doc[m.end():]
      if rest and (rest[0] in "[(-" or rest[0].isdigit() or rest.startswith(("True", "False"))):
        found.append((name, m.group(1), _value_after(rest)))
  return found

def test_inline_examples():
  examples = inline_examples()
  assert len(examples) >= 30
  wrong = []
  for name, expr, value in examples:
    got = _plain(eval(expr, {"Tensor": Tensor, "dtypes": dtypes}))
    if not _close(got, ast.literal_eval(value)): wrong.append(f"{name}: `{expr}` is {got}, the docstring says {value}")
  assert not wrong, "\n".join(wrong)

# *** every op has a runnable example ***

MODULE_PAGES = {"nn": nn, "optim": optim, "state": state}  # docs/<page>.md documents the module

def calls(code: str, name: str) -> bool:
  """Whether code uses name: `x.name` or `Tensor.name` (a call, or a property read), `x[i]` for __getitem__, `x[i] = v`
  for __setitem__."""
  dunder = {ast.Load: "__getitem__", ast.Store: "__setitem__"}
  for node in ast.walk(ast.parse(code)):
    if isinstance(node, ast.Attribute) and node.attr == name: return True
    if isinstance(node, ast.Subscript) and dunder.get(type(node.ctx)) == name: return True
  return False

def all_examples() -> dict[str, dict[str, str]]:
  """The examples of each page (docs/examples/<page>.py) by the name they show."""
  hooks = _hooks()
  return {page: hooks.examples(page) for page in [*hooks.tensor_groups(), *MODULE_PAGES]}

def test_every_op_has_an_example():
  examples, groups = all_examples(), _hooks().tensor_groups()
  shown = {name: code for group in groups for name, code in examples[group].items()}
  problems = [f"Tensor.{n}: no doctest and no example in docs/examples/" for n, obj in tensor_api().items()
              if ">>>" not in (inspect.getdoc(obj) or "") and n not in shown]
  for page, mod in MODULE_PAGES.items():
    names = [k.split(".")[-1] for k in module_api(mod) if k.count(".") == mod.__name__.count(".") + 1]
    problems += [f"{mod.__name__}.{n}: no example in docs/examples/{page}.py" for n in names if n not in examples[page]]
  for page, found in examples.items():
    members = groups[page] if page in groups else _hooks().page_members(page)
    problems += [f"docs/examples/{page}.py: {n} is not on its page" for n in found if n not in members]
    problems += [f"docs/examples/{page}.py: {n}'s example doesn't use it" for n, c in found.items() if not calls(c, n)]
  assert len(shown) > 150  # (the listing sees the examples)
  assert not problems, "\n".join(problems)

RUN_EXAMPLES = """
import contextlib, io, json, sys, traceback
out = {}
for name, code in json.load(sys.stdin).items():
  buf = io.StringIO()
  try:
    with contextlib.redirect_stdout(buf): exec(compile(code, name, "exec"), {"__name__": "example"})
    out[name] = "" if buf.getvalue() else "printed nothing"
  except Exception: out[name] = "failed: " + traceback.format_exc(limit=-1)
print(json.dumps(out))
"""

def test_examples_run():
  """Every example runs and prints something, in a process of their own: they seed the random numbers and move
  tensors between devices, which must not leak into the other tests."""
  examples = {f"{page}: {name}": code for page, found in all_examples().items() for name, code in found.items()}
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
  proc = subprocess.run([sys.executable, "-c", RUN_EXAMPLES], input=json.dumps(examples), capture_output=True,
                        text=True, cwd=ROOT, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  printed = json.loads(proc.stdout.splitlines()[-1])
  assert len(printed) == len(examples)
  assert not any(printed.values()), {k: v for k, v in printed.items() if v}
