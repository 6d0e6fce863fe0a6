"""mkdocs hooks: the parts of the site made from the code, so that they can't drift from it.

  <!-- tensor-api: GROUP -->  the Tensor methods of one group, rendered from their docstrings (mkdocstrings)
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

def tensor_api(group: str) -> str:
  members = tensor_groups()[group]
  return ("::: fusegrad.tensor.Tensor\n    options:\n      show_root_heading: false\n      show_root_toc_entry: false\n"
          "      inherited_members: true\n      filters: []\n      show_bases: false\n"
          f"      members: [{', '.join(members)}]\n")

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

def on_page_markdown(markdown: str, **kwargs) -> str:
  markdown = re.sub(r"<!-- tensor-api: (\w+) -->", lambda m: tensor_api(m.group(1)), markdown)
  return markdown.replace("<!-- flag-table -->", flag_table())
