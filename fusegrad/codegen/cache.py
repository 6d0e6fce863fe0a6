"""The disk cache of codegen: kernel AST, renderer and opt settings -> ProgramSpec (docs/developer/codegen.md)."""
from __future__ import annotations
import hashlib, json
from fusegrad.dtype import dtypes, DType
from fusegrad.helpers import ContextVar, diskcache_get, diskcache_put, code_version
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops
from fusegrad.codegen import ProgramSpec, ast_key
from fusegrad.codegen.kernel import Opt, OptOps

def spec_key(ast: UOp, ren: Renderer) -> str:
  """The cache key of a kernel's codegen: every node of the AST in order, the renderer and the settings."""
  # every flag but those that only show what happens (NOOPT, BEAM and any a pass may read later)
  shown = ("DEBUG", "VIZ", "VIZ_PORT", "VIZ_OUT")
  flags = " ".join(f"{k}={v.value!r}" for k, v in sorted(ContextVar._cache.items()) if k not in shown)
  code = code_version("codegen/*.py", "renderer/*.py", "uop/*.py", "dtype.py")  # what turns an AST into source
  return hashlib.sha256("\n".join([code, repr(ren), flags, ast_key(ast)]).encode()).hexdigest()

_DTYPES: dict[str, DType] = {dt.name: dt for dt in vars(dtypes).values() if isinstance(dt, DType)}

def spec_to_bytes(p: ProgramSpec) -> bytes:
  return json.dumps({"name": p.name, "src": p.src, "global_size": p.global_size, "local_size": p.local_size,
                     "vars": [[v.dtype.name, *v.arg] for v in p.vars], "flops": p.flops,
                     "opts": [[o.op.name, o.axis, o.arg] for o in p.applied_opts], "function": p.function}).encode()

def spec_from_bytes(data: bytes, device: str) -> ProgramSpec | None:
  """The ProgramSpec stored in data, or None for anything malformed."""
  try:
    d = json.loads(data)
    variables = [UOp(Ops.DEFINE_VAR, _DTYPES[dt], (), (str(name), int(lo), int(hi))) for dt, name, lo, hi in d["vars"]]
    return ProgramSpec(str(d["name"]), str(d["src"]), device, [], tuple(int(x) for x in d["global_size"]),
                       None if d["local_size"] is None else tuple(int(x) for x in d["local_size"]), variables,
                       [Opt(OptOps[op], int(axis), int(arg)) for op, axis, arg in d["opts"]], int(d["flops"]),
                       str(d.get("function", "")))
  except (ValueError, KeyError, TypeError, AttributeError): return None

def cached_spec(key: str, device: str) -> ProgramSpec | None:
  return None if (data := diskcache_get("codegen", key)) is None else spec_from_bytes(data, device)

def cache_spec(key: str, p: ProgramSpec) -> None: diskcache_put("codegen", key, spec_to_bytes(p))
