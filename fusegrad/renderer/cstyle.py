"""C-style renderers: one base for C (the CPU backend), OpenCL C and CUDA C.

In:  a flat program (codegen.linearize). Out: the source of one kernel function.
Each op has one entry in code_for_op; a device's dialect overrides types, prefixes, launch indices and barriers.
"""
from __future__ import annotations
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable
from fusegrad.dtype import DType, dtypes, PtrDType
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops, GroupOp

def _signed_idiv(a: str, b: str) -> str: return f"(({b})==0?0:({b})==-1?(0-({a})):({a})/({b}))"
def _signed_mod(a: str, b: str) -> str: return f"(({b})==0||({b})==-1?0:({a})%({b}))"

@dataclass(frozen=True)
class CStyleLanguage(Renderer):
  kernel_prefix: str = ""
  buffer_prefix: str = ""
  buffer_suffix: str = " restrict"
  arg_int_prefix: str = "const int"
  smem_prefix: str = ""
  barrier: str = ""
  float4: str | None = None
  type_map: dict[DType, str] = field(default_factory=dict)
  special_code: dict[str, str] = field(default_factory=dict)  # "gidx"/"lidx" -> format with the dimension number
  fn_suffix: dict[DType, str] = field(default_factory=lambda: {dtypes.float32: "f", dtypes.float64: ""})

  # *** how each op is written ***
  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return f"{self.render_dtype(dt.base)}*"
    return self.type_map.get(dt.scalar(), dt.scalar().name)

  def render_const(self, val: object, dt: DType) -> str:
    if dtypes.is_float(dt):
      assert isinstance(val, float)
      if math.isnan(val): ret = "__builtin_nanf(\"\")" if dt != dtypes.float64 else "__builtin_nan(\"\")"
      elif math.isinf(val): ret = ("-" if val < 0 else "") + ("__builtin_inff()" if dt != dtypes.float64 else "__builtin_inf()")
      else: ret = repr(val) + ("" if dt == dtypes.float64 else "f")
      return ret if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)})({ret}))"
    if dt == dtypes.bool: return "1" if val else "0"
    assert isinstance(val, int)
    if dt in (dtypes.int64, dtypes.uint64):
      ret = f"{val}{'ull' if dt == dtypes.uint64 else 'll'}"
      return ret if val != -2 ** 63 else "(-9223372036854775807ll-1)"
    if dt == dtypes.int32 and val == -2 ** 31: return "(-2147483647-1)"
    if dt in (dtypes.uint32, dtypes.uint16, dtypes.uint8): return f"{val}u"
    return str(val)

  def render_math(self, fn: str, x: str, dt: DType) -> str:
    """A libm function; types without their own version compute in float."""
    if dt in self.fn_suffix: return f"__builtin_{fn}{self.fn_suffix[dt]}({x})"
    return f"__builtin_{fn}f((float)({x}))"

  def render_alu(self, u: UOp, src: list[str]) -> str:
    op, dt, a = u.op, u.dtype, src[0]
    b = src[1] if len(src) > 1 else ""
    if op is Ops.EXP2: return self.render_math("exp2", a, dt)
    if op is Ops.LOG2: return self.render_math("log2", a, dt)
    if op is Ops.SIN: return self.render_math("sin", a, dt)
    if op is Ops.SQRT: return self.render_math("sqrt", a, dt)
    if op is Ops.TRUNC: return self.render_math("trunc", a, dt)
    if op is Ops.RECIPROCAL: return f"({self.render_const(1.0, dt)}/{a})"
    if op is Ops.MAX: return f"((({a})>({b})||({a})!=({a}))?({a}):({b}))"
    if op is Ops.WHERE: return f"({a}?{b}:{src[2]})"
    if op is Ops.MULACC: return f"(({a}*{b})+{src[2]})"
    if op in (Ops.IDIV, Ops.MOD) and not (u.src[1].op is Ops.CONST and u.src[1].arg > 0):  # never trap on x/0 or INT_MIN/-1
      if dtypes.is_unsigned(dt): return f"(({b})==0?0:({a}){'/' if op is Ops.IDIV else '%'}({b}))"
      return _signed_idiv(a, b) if op is Ops.IDIV else _signed_mod(a, b)
    infix = {Ops.ADD: "+", Ops.MUL: "*", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.AND: "&", Ops.OR: "|",
             Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}
    if op in infix: return f"({a}{infix[op]}{b})"
    raise NotImplementedError(f"{type(self).__name__} can't render {op}")

  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    if dt == dtypes.bool: return f"(({x})!=0)"
    return f"(({self.render_dtype(dt)})({x}))"

  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    return f"__builtin_bit_cast({self.render_dtype(dt)}, ({self.render_dtype(from_dt)})({x}))"

  def render_special(self, name: str) -> str:
    return self.special_code[name[:4]].format(int(name[4:]))

  def render_kernel(self, name: str, params: list[str], body: list[str], prelude: list[str]) -> str:
    return "\n".join(prelude + [f"{self.kernel_prefix}void {name}({', '.join(params)}) {{"] + body + ["}"]) + "\n"

  def render_prelude(self, uops: list[UOp]) -> list[str]: return []

  # *** the program ***
  def render(self, name: str, uops: list[UOp]) -> str:
    names: dict[UOp, str] = {}
    uses = Counter(s for u in uops for s in u.src)
    written = {u.src[0] for u in uops if u.op is Ops.STORE}
    params, body, depth, counter = [], [], 1, Counter()
    def new_name(prefix: str) -> str:
      counter[prefix] += 1
      return f"{prefix}{counter[prefix] - 1}"
    def line(s: str) -> None: body.append("  " * depth + s)
    for u in uops:
      src = [names[s] if s.op is not Ops.CONST else self.render_const(s.arg, s.dtype) for s in u.src]
      if u.op is Ops.DEFINE_GLOBAL:
        names[u] = f"data{u.arg}"
        const = "" if u in written else "const "
        params.append(f"{self.buffer_prefix}{const}{self.render_dtype(u.dtype)}{self.buffer_suffix} {names[u]}")
      elif u.op is Ops.DEFINE_VAR:
        names[u] = u.arg[0]
        params.append(f"{self.arg_int_prefix} {u.arg[0]}")
      elif u.op is Ops.SPECIAL:
        names[u] = u.arg[0]
        line(f"int {u.arg[0]} = {self.render_special(u.arg[0])}; /* {u.arg[1]} */")
      elif u.op is Ops.CONST: names[u] = self.render_const(u.arg, u.dtype)
      elif u.op is Ops.RANGE:
        names[u] = f"ridx{u.arg[0]}"
        line(f"for (int {names[u]} = 0; {names[u]} < {src[0]}; {names[u]}++) {{")
        depth += 1
      elif u.op is Ops.ENDRANGE:
        depth -= 1
        line("}")
      elif u.op is Ops.DEFINE_LOCAL:
        names[u] = u.arg[0]
        line(f"{self.smem_prefix}{self.render_dtype(u.dtype.base)} {u.arg[0]}[{u.arg[1]}];")
      elif u.op is Ops.BARRIER: line(self.barrier)
      elif u.op is Ops.LOAD:
        names[u] = new_name("val")
        access = f"{src[0]}[{src[1]}]"
        val = access if len(src) == 2 else f"({src[2]}?{access}:{self.render_const(0.0 if dtypes.is_float(u.dtype) else 0, u.dtype)})"
        line(f"{self.render_dtype(u.dtype)} {names[u]} = {val};")
      elif u.op is Ops.STORE:
        stmt = f"{src[0]}[{src[1]}] = {src[2]};"
        line(stmt if len(src) == 3 else f"if ({src[3]}) {stmt}")
      elif u.op is Ops.DEFINE_ACC:
        names[u] = new_name("acc")
        line(f"{self.render_dtype(u.dtype)} {names[u]} = {src[0]};")
      elif u.op is Ops.ASSIGN: line(f"{src[0]} = {src[1]};")
      elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
        if u.op is Ops.CAST: expr = self.render_cast(src[0], u.dtype, u.src[0].dtype)
        elif u.op is Ops.BITCAST: expr = self.render_bitcast(src[0], u.dtype, u.src[0].dtype)
        else: expr = self.render_alu(u, src)
        # small integer expressions used once are written inline; every float result gets a variable (it rounds)
        if uses[u] == 1 and (dtypes.is_int(u.dtype) or u.dtype == dtypes.bool) and u.op not in (Ops.MAX, Ops.IDIV, Ops.MOD, Ops.BITCAST):
          names[u] = expr
        else:
          names[u] = new_name("alu" if u.op in GroupOp.ALU else "cast")
          line(f"{self.render_dtype(u.dtype)} {names[u]} = {expr};")
      else: raise NotImplementedError(f"{type(self).__name__} can't render {u.op}")
    return self.render_kernel(name, params, body, self.render_prelude(uops))

@dataclass(frozen=True)
class ClangRenderer(CStyleLanguage):
  """C for the CPU backend, compiled by clang or gcc (half is __fp16 with clang, _Float16 with gcc)."""
  device: str = "CPU"
  half_type: str = "_Float16"
  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return f"{self.render_dtype(dt.base)}*"
    return {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
            dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
            dtypes.uint64: "unsigned long long", dtypes.float16: self.half_type, dtypes.float32: "float",
            dtypes.float64: "double"}[dt.scalar()]
  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    # clang's double -> __fp16 calls a runtime helper whose ABI libgcc doesn't share (garbage results): via float
    if self.half_type == "__fp16" and dt.scalar() == dtypes.float16 and from_dt.scalar() == dtypes.float64:
      return f"(({self.half_type})((float)({x})))"
    return super().render_cast(x, dt, from_dt)
  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    t, f = self.render_dtype(dt), self.render_dtype(from_dt)
    return f"({{union {{ {f} a; {t} b; }} u_; u_.a = ({f})({x}); u_.b;}})"
  def render_kernel(self, name: str, params: list[str], body: list[str], prelude: list[str]) -> str:
    return "\n".join(prelude + [f"void {name}({', '.join(params)}) {{"] + body + ["}"]) + "\n"
