"""mkdocs hooks: the parts of the site made from the code, so that they can't drift from it.

  <!-- tensor-api: GROUP -->  the Tensor methods of one group, rendered from their docstrings (mkdocstrings), each
                              followed by its example from docs/examples/GROUP.py, run at build time (markdown-exec)
  <!-- api: MODULE: A, B -->  a module's members A, B, ..., each followed by its example from docs/examples/PAGE.py
  <!-- flag-table -->         every flag (environment variable and Context name) from its one definition in
                              fusegrad/helpers.py; a flag without a doc line, or an environment read anywhere else in
                              the package, fails the build
"""
from __future__ import annotations
import pathlib, re
from fusegrad import Tensor
from fusegrad.helpers import ContextVar
from fusegrad.mixin.elementwise import ElementwiseMixin
from fusegrad.mixin.movement import MovementMixin
from fusegrad.mixin.reduce import ReduceMixin
from fusegrad.mixin.linalg import LinalgMixin
from fusegrad.mixin.nn import NNMixin
from fusegrad.mixin.conv import ConvMixin
from fusegrad.mixin.gather import GatherMixin
from fusegrad.mixin.loss import LossMixin
from fusegrad.mixin.sort import SortMixin
from fusegrad.mixin.creation import CreationMixin

ROOT = pathlib.Path(__file__).resolve().parent.parent
CREATION = ["empty", "zeros", "ones", "full", "arange", "linspace", "eye", "zeros_like", "ones_like", "full_like",
            "empty_like", "rand", "randn", "randint", "randperm", "normal", "uniform", "scaled_uniform",
            "glorot_uniform", "kaiming_uniform", "kaiming_normal", "rand_like", "randn_like", "multinomial",
            "manual_seed", "from_blob", "from_url"]
INDEXING = ["__getitem__", "__setitem__", "gather", "scatter", "scatter_add", "scatter_reduce", "masked_select",
            "nonzero", "one_hot"]

def public(cls: type) -> list[str]: return [n for n in cls.__dict__ if not n.startswith("_")]

def tensor_groups() -> dict[str, list[str]]:
  """Every public Tensor method and property in exactly one group (the ones Tensor defines itself and that are not
  creation methods are its properties and data)."""
  own = [n for n in public(Tensor) + public(CreationMixin) if n not in ("no_grad", "training")]  # (class attributes,
  # documented in prose)
  missing = [n for n in CREATION if n not in own]
  if missing: raise ValueError(f"docs/hooks.py lists creation methods Tensor doesn't have: {missing}")
  nn = [n for m in (NNMixin, ConvMixin, GatherMixin, LossMixin, SortMixin) for n in public(m) if n not in INDEXING]
  return {"creation": CREATION, "elementwise": public(ElementwiseMixin), "movement": public(MovementMixin),
          "indexing": INDEXING, "reductions": public(ReduceMixin) + public(LinalgMixin), "nn_functional": nn,
          "properties": [n for n in own if n not in CREATION]}

CELL = re.compile(r"^# %% (\S+)\n", re.M)

def examples(page: str) -> dict[str, str]:
  """The examples of docs/examples/<page>.py by the name they show: its `# %% NAME` cells, each with the file's header
  (the imports above the first cell) prepended as lines markdown-exec runs but doesn't show."""
  path = ROOT / "docs" / "examples" / f"{page}.py"
  if not path.exists(): return {}
  header, *cells = CELL.split(path.read_text())
  hidden = "".join(f"{line}  # markdown-exec: hide\n" for line in header.splitlines() if line.strip())
  return {name: hidden + code.strip() + "\n" for name, code in zip(cells[::2], cells[1::2])}

def api(parent: str, members: list[str], page: str, level: int) -> str:
  """One mkdocstrings entry per member of parent, each followed by its example (a block run at build time)."""
  found = examples(page)
  unknown = set(found) - set(members)
  if unknown: raise ValueError(f"docs/examples/{page}.py has examples of names not on its page: {sorted(unknown)}")
  def example(name: str) -> str:
    if name not in found: return ""
    return f'```python exec="true" source="above" result="text" id="{page}-{name}"\n{found[name]}```\n\n'
  options = ("    options:\n      show_root_heading: true\n      show_root_full_path: false\n"
             f"      heading_level: {level}\n")
  return "".join(f"::: {parent}.{name}\n{options}\n{example(name)}" for name in members)

def tensor_api(group: str) -> str: return api("fusegrad.tensor.Tensor", tensor_groups()[group], group, 3)

API = re.compile(r"<!-- api: ([\w.]+): ([^>]*) -->")

def module_api(page: str, module: str, members: str) -> str: return api(module, re.findall(r"\w+", members), page, 2)

def page_members(page: str) -> list[str]:
  """The module members docs/<page>.md shows (its `<!-- api: MODULE: A, B -->` lines)."""
  return [n for m in API.finditer((ROOT / "docs" / f"{page}.md").read_text()) for n in re.findall(r"\w+", m.group(2))]

def flag_table() -> str:
  """The flags as a Markdown table; ValueError for a flag without its doc line, or an environment read elsewhere."""
  undocumented = [k for k, v in ContextVar._cache.items() if not v.doc.strip()]
  if undocumented: raise ValueError(f"flags without a doc line in fusegrad/helpers.py: {undocumented}")
  elsewhere = [f"{p.relative_to(ROOT)}:{i + 1}" for p in sorted((ROOT / "fusegrad").rglob("*.py"))
               if p.name != "helpers.py" for i, line in enumerate(p.read_text().splitlines())
               if re.search(r"\bgetenv\(|os\.environ(\.get)?\[|os\.environ\.get\(|os\.getenv\(", line)]
  if elsewhere: raise ValueError(f"environment read outside fusegrad/helpers.py (declare a flag there): {elsewhere}")
  def cell(s: str) -> str: return s.replace('|', '&#124;').replace('<', '&lt;').replace('>', '&gt;')
  rows = [f"| `{v.key}` | `{v.default!r}` | {cell(v.doc)} |" for v in ContextVar._cache.values()]
  return "| flag | default | what it does |\n|---|---|---|\n" + "\n".join(rows) + "\n"

def on_page_markdown(markdown: str, page, **kwargs) -> str:
  markdown = re.sub(r"<!-- tensor-api: (\w+) -->", lambda m: tensor_api(m.group(1)), markdown)
  stem = pathlib.Path(page.file.src_path).stem
  markdown = API.sub(lambda m: module_api(stem, m.group(1), m.group(2)), markdown)
  return markdown.replace("<!-- flag-table -->", flag_table())
