"""WGSL, the WebGPU shading language: a dialect of the C-style renderer (its tables and a few hooks, no render loop).
How it differs from C (packed narrow integers, int64 as vec2<u32>): docs/developer/renderer.md and docs/webgpu.md."""
from __future__ import annotations
import math
from dataclasses import dataclass, field
from fusegrad.dtype import DType, dtypes, PtrDType
from fusegrad.renderer import UnsupportedDTypeError
from fusegrad.renderer.cstyle import CStyleLanguage, C_OPS, known_dtype, _as_half
from fusegrad.uop.ops import UOp, Ops

# the register type of each dtype WGSL can hold (narrow integers live in 32-bit registers)
WGSL_TYPES = {dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
              dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float16: "f16", dtypes.float32: "f32"}
PACKED = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)  # stored in lanes of u32 words
WIDE = (dtypes.int64, dtypes.uint64)  # vec2<u32> (low, high)

# 64-bit integers on pairs of u32 words (two's complement: add and mul don't care about the sign)
I64_HELPERS = """alias u64v = vec2<u32>;
fn fg_add64(a: u64v, b: u64v) -> u64v { let lo = a.x + b.x; return u64v(lo, a.y + b.y + select(0u, 1u, lo < a.x)); }
fn fg_mulhi(a: u32, b: u32) -> u32 {
  let a0 = a & 0xffffu; let a1 = a >> 16u; let b0 = b & 0xffffu; let b1 = b >> 16u;
  let mid = ((a0 * b0) >> 16u) + ((a0 * b1) & 0xffffu) + ((a1 * b0) & 0xffffu);
  return a1 * b1 + ((a0 * b1) >> 16u) + ((a1 * b0) >> 16u) + (mid >> 16u);
}
fn fg_mul64(a: u64v, b: u64v) -> u64v { return u64v(a.x * b.x, fg_mulhi(a.x, b.x) + a.x * b.y + a.y * b.x); }
fn fg_shl64(a: u64v, n: u32) -> u64v {
  if (n >= 64u) { return u64v(0u); } if (n >= 32u) { return u64v(0u, a.x << (n - 32u)); } if (n == 0u) { return a; }
  return u64v(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}
fn fg_shr64(a: u64v, n: u32, signed: bool) -> u64v {
  let fill = select(0u, 0xffffffffu, signed && (a.y >> 31u) == 1u);
  if (n >= 64u) { return u64v(fill); } if (n == 0u) { return a; }
  if (n >= 32u) { return u64v(select(a.y >> (n - 32u), bitcast<u32>(bitcast<i32>(a.y) >> (n - 32u)), signed), fill); }
  return u64v((a.x >> n) | (a.y << (32u - n)), select(a.y >> n, bitcast<u32>(bitcast<i32>(a.y) >> n), signed));
}
fn fg_lt64(a: u64v, b: u64v, signed: bool) -> bool {
  let flip = select(0u, 0x80000000u, signed);
  return (a.y ^ flip) < (b.y ^ flip) || (a.y == b.y && a.x < b.x);
}
fn fg_neg64(a: u64v) -> u64v { return fg_add64(~a, u64v(1u, 0u)); }
fn fg_f32_to_64(x: f32) -> u64v {
  let t = abs(trunc(x)); let hi = u32(t / 4294967296.0f); let v = u64v(u32(t - f32(hi) * 4294967296.0f), hi);
  return select(v, fg_neg64(v), x < 0.0f);
}
fn fg_64_to_f32(a: u64v, signed: bool) -> f32 {
  let neg = signed && (a.y >> 31u) == 1u; let v = select(a, fg_neg64(a), neg);
  let r = f32(v.y) * 4294967296.0f + f32(v.x); return select(r, -r, neg);
}"""

# ops on 64-bit integers by those helpers: {0} {1} {2} the operands, {s} whether they are signed, {n} a shift count
WIDE_OPS = {
  Ops.ADD: "fg_add64({0}, {1})", Ops.MUL: "fg_mul64({0}, {1})", Ops.MULACC: "fg_add64(fg_mul64({0}, {1}), {2})",
  Ops.CMPNE: "any({0} != {1})", Ops.CMPLT: "fg_lt64({0}, {1}, {s})", Ops.WHERE: "select({2}, {1}, {0})",
  Ops.MAX: "select({1}, {0}, fg_lt64({1}, {0}, {s}))", Ops.SHL: "fg_shl64({0}, {n})",
  Ops.SHR: "fg_shr64({0}, {n}, {s})"}

# float16 without shader-f16: f32 registers, rounded to float16 after each op and stored as 16-bit lanes of u32 words
# (pack2x16float's result is undefined beyond float16's range: those values become infinities here first)
HALF_HELPER = """fn fg_half(x: f32) -> u32 {
  if (abs(x) >= 65520.0f) { return select(0x7c00u, 0xfc00u, x < 0.0f); }
  return pack2x16float(vec2<f32>(x, 0.0f)) & 0xffffu;
}"""

def _narrow(x: str, dt: DType) -> str:
  """x (an i32 or u32 expression) wrapped to dt's width; 32-bit values and bools unchanged."""
  if dt not in PACKED or dt == dtypes.bool: return x
  bits = 8 * dt.itemsize
  if dtypes.is_unsigned(dt): return f"(({x}) & {2 ** bits - 1}u)"
  return f"(bitcast<i32>(bitcast<u32>({x}) << {32 - bits}u) >> {32 - bits}u)"

@dataclass(frozen=True)
class WGSLRenderer(CStyleLanguage):
  device: str = "WEBGPU"
  has_local: bool = True
  has_shared: bool = True
  global_max: tuple[int, ...] | None = (65535, 65535, 65535)
  local_max: tuple[int, ...] | None = (256, 256, 64)
  max_workgroup: int = 256
  shared_max: int = 16384
  max_buffers: int = 8             # WebGPU's default limit; the device passes its own
  supports_float16: bool = False
  supports_float64: bool = False
  index64_ranges: bool = False
  buffer_suffix: str = ""
  barrier: str = "workgroupBarrier();"
  decl: str = "let {name}: {type} = {val};"
  mutable_decl: str = "var {name}: {type} = {val};"
  loop_open: str = "for (var {name}: {type} = 0; {name} < {size}; {name}++) {{"
  guarded: str = "if ({cond}) {{ {stmt} }}"
  vector: str = "{type}({val})"
  local_decl: str = "var<workgroup> {name}: array<{type}, {size}>;"
  locals_in_prelude: bool = True
  code_for_op: dict[Ops, str] = field(default_factory=lambda: {**C_OPS, Ops.SHL: "({0}<<u32({1}))", Ops.SHR:
    "({0}>>u32({1}))", Ops.MAX: "select({1}, {0}, ({0}>{1}) || ({0}!={0}))", Ops.WHERE: "select({2}, {1}, {0})"})

  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return self.render_dtype(dt.base)
    if dt.scalar() in WIDE and dt.count == 1: return "u64v"
    scalar = WGSL_TYPES.get(known_dtype(dt.scalar()))
    if scalar == "f16" and not self.supports_float16: scalar = "f32"  # stored in 16-bit lanes (see _packed)
    if scalar is None: raise UnsupportedDTypeError(f"dtype {dt.scalar().name} is not supported on device {self.device}")
    return scalar if dt.count == 1 else f"vec{dt.count}<{scalar}>"

  def supports_dtype(self, dt: DType) -> bool:
    if dt in (dtypes.void, dtypes.index) or dt in WIDE: return True  # statements; index math: see render_index_type
    return dt in WGSL_TYPES

  def _packed(self, dt: DType) -> bool:
    """Stored in lanes of u32 words: bool and narrow integers, and float16 without the adapter's shader-f16."""
    return dt in PACKED or (dt == dtypes.float16 and not self.supports_float16)

  def _half(self, x: str, dt: DType) -> str:
    """x rounded to float16 when dt is float16 held in an f32 register (no shader-f16); else x."""
    return x if dt != dtypes.float16 or self.supports_float16 else f"unpack2x16float(fg_half({x})).x"

  def render_index_type(self, dt: DType) -> str:
    if dt in WIDE: raise UnsupportedDTypeError(f"64-bit index math (dtype {dt.name}) is not supported on device "
                                               f"{self.device}: its buffers are smaller than 2**31 elements")
    return "i32" if dt == dtypes.index else self.render_dtype(dt)

  def render_const(self, val: object, dt: DType) -> str:
    if dt.count > 1: return f"{self.render_dtype(dt)}({self.render_const(val, dt.scalar())})"
    if dtypes.is_float(dt):
      assert isinstance(val, float)
      if dt == dtypes.float16: val = _as_half(val)
      if not math.isfinite(val):  # WGSL rejects inf and nan in constant expressions: built at run time from bits
        bits = "fg_nan" if math.isnan(val) else "fg_inf"
        ret = f"bitcast<f32>({bits})" if val > 0 or math.isnan(val) else f"(-bitcast<f32>({bits}))"
        return ret if dt == dtypes.float32 else f"{self.render_dtype(dt)}({ret})"
      return f"{val!r}{'h' if dt == dtypes.float16 and self.supports_float16 else 'f'}"
    if dt == dtypes.bool: return "true" if val else "false"
    assert isinstance(val, int)
    if dt in WIDE: return f"u64v({val & 0xFFFFFFFF}u, {(val >> 32) & 0xFFFFFFFF}u)"
    return f"{val}u" if dtypes.is_unsigned(dt) else "bitcast<i32>(0x80000000u)" if val == -2 ** 31 else f"{val}i"

  def render_math(self, fn: str, x: str, dt: DType) -> str:
    return f"{fn}({x})" if dtypes.is_float(dt) else f"{fn}(f32({x}))"

  def render_wide_alu(self, u: UOp, src: list[str]) -> str:
    """An op on 64-bit integers (vec2<u32>): WIDE_OPS, or the bitwise ops of code_for_op (word by word)."""
    if u.op in (Ops.AND, Ops.OR, Ops.XOR): return self.code_for_op[u.op].format(*src)
    if u.op not in WIDE_OPS:
      raise UnsupportedDTypeError(f"{u.op.name} on dtype {u.src[0].dtype.name} is not supported on device "
                                  f"{self.device}")
    count = "" if u.op not in (Ops.SHL, Ops.SHR) else f"{src[1]}.x" if u.src[1].dtype in WIDE else f"u32({src[1]})"
    return WIDE_OPS[u.op].format(*src, s="true" if u.src[0].dtype == dtypes.int64 else "false", n=count)

  def render_alu(self, u: UOp, src: list[str]) -> str:
    op, dt = u.op, u.dtype
    if u.src[-1].dtype in WIDE or (op is Ops.CMPLT or op is Ops.CMPNE) and u.src[0].dtype in WIDE:
      return self.render_wide_alu(u, src)
    if op is Ops.MOD and dtypes.is_float(dt): return f"({src[0]}%{src[1]})"  # (x - y * trunc(x / y), not exact)
    if op in (Ops.IDIV, Ops.MOD):  # x/0 and x%0 are 0, as in the other backends
      zero = self.render_const(0, dt)
      return _narrow(f"select(({src[0]}{'/' if op is Ops.IDIV else '%'}{src[1]}), {zero}, ({src[1]})=={zero})", dt)
    if u.src[0].dtype == dtypes.bool and op in (Ops.XOR, Ops.CMPLT, Ops.MAX):  # WGSL orders no bools
      return {Ops.XOR: "({0}!={1})", Ops.CMPLT: "((!{0})&{1})", Ops.MAX: "({0}|{1})"}[op].format(*src)
    if op in (Ops.MAX, Ops.CMPNE) and dtypes.is_float(u.src[0].dtype):  # NaN by its bits: compilers may assume no NaN
      a, b = src
      if op is Ops.MAX: return f"select({b}, {a}, ({a}>{b}) || fg_isnan(f32({a})))"
      return f"(({a}!={b}) || fg_isnan(f32({a})) || fg_isnan(f32({b})))"
    return self._half(_narrow(super().render_alu(u, src), dt), dt)

  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    if from_dt in WIDE and dt in WIDE: return x
    if from_dt in WIDE:
      signed = "true" if from_dt == dtypes.int64 else "false"
      if dtypes.is_float(dt): return f"{self.render_dtype(dt)}(fg_64_to_f32({x}, {signed}))"
      if dt == dtypes.bool: return f"any({x} != u64v(0u))"
      return _narrow(f"{self.render_dtype(dt)}({x}.x)" if dtypes.is_unsigned(dt) else f"bitcast<i32>({x}.x)", dt)
    if dt in WIDE:
      if dtypes.is_float(from_dt): return f"fg_f32_to_64(f32({x}))"
      if from_dt == dtypes.bool or dtypes.is_unsigned(from_dt): return f"u64v(u32({x}), 0u)"
      return f"u64v(bitcast<u32>(i32({x})), select(0u, 0xffffffffu, i32({x}) < 0i))"
    return self._half(_narrow(f"{self.render_dtype(dt)}({x})", dt), dt)

  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    if dt.itemsize != from_dt.itemsize or dt.itemsize not in (1, 2, 4):
      raise UnsupportedDTypeError(f"bitcast {from_dt.name} -> {dt.name} is not supported on device {self.device}")
    if from_dt == dtypes.float16: x = f"pack2x16float(vec2<f32>(f32({x}), 0.0f))"  # its bits, in a u32
    if dt == dtypes.float16: return f"{self.render_dtype(dt)}(unpack2x16float(u32({x}) & 0xffffu).x)"
    return _narrow(f"bitcast<{self.render_dtype(dt)}>({x})", dt)  # narrow ints: the low bits, wrapped to dt

  def render_special(self, name: str) -> str:
    return f"i32({'gindex' if name.startswith('gidx') else 'lindex'}.{'xyz'[int(name[4:])]})"

  # *** memory: packed lanes for bool and narrow integers ***
  def render_load(self, u: UOp, buf: str, idx: str) -> str:
    dt = u.dtype
    if u.src[1].dtype in WIDE: idx = f"bitcast<i32>({idx}.x)"  # int64 index math: an index fits in its low word
    if not self._packed(dt) or u.src[0].op is not Ops.DEFINE_GLOBAL: return f"{buf}[{idx}]"
    word, bits = f"atomicLoad(&{buf}[({idx}) / {4 // dt.itemsize}])", 8 * dt.itemsize
    lane = f"(({word} >> (u32(({idx}) % {4 // dt.itemsize}) * {bits}u)) & {2 ** bits - 1}u)"
    if dt == dtypes.bool: return f"({lane} != 0u)"
    if dt == dtypes.float16: return f"unpack2x16float({lane}).x"
    return lane if dtypes.is_unsigned(dt) else _narrow(f"bitcast<i32>({lane})", dt)

  def render_store(self, u: UOp, buf: str, idx: str, val: str) -> str:
    dt = u.src[2].dtype
    if u.src[1].dtype in WIDE: idx = f"bitcast<i32>({idx}.x)"
    if not self._packed(dt) or u.src[0].op is not Ops.DEFINE_GLOBAL: return f"{buf}[{idx}] = {val};"
    per, bits = 4 // dt.itemsize, 8 * dt.itemsize
    word, shift = f"&{buf}[({idx}) / {per}]", f"(u32(({idx}) % {per}) * {bits}u)"
    lane = f"fg_half({val})" if dt == dtypes.float16 else f"(u32({val}) & {2 ** bits - 1}u)"
    return f"{{ atomicAnd({word}, ~({2 ** bits - 1}u << {shift})); atomicOr({word}, {lane} << {shift}); }}"

  # *** the kernel: bindings at module scope, an entry point with builtin launch indices ***
  def render_buffer_param(self, name: str, dt: DType, index: int, written: bool) -> str:
    base = dt.base if isinstance(dt, PtrDType) else dt
    elem = "atomic<u32>" if self._packed(base) else self.render_dtype(base)
    return f"@group(0) @binding({index}) var<storage, read_write> {name}: array<{elem}>;"

  def render_var_param(self, name: str, index: int) -> str:
    return f"@group(0) @binding({index}) var<uniform> {name}: i32;"

  def render_kernel_name(self, name: str, uops: list[UOp]) -> str:
    local = [next((u.arg[1] for u in uops if u.op is Ops.SPECIAL and u.arg[0] == f"lidx{i}"), 1) for i in range(3)]
    return f"@compute @workgroup_size({', '.join(map(str, local))})\nfn {name}"

  def render_kernel(self, name: str, params: list[str], body: list[str], prelude: list[str]) -> str:
    args = "@builtin(workgroup_id) gindex: vec3<u32>, @builtin(local_invocation_id) lindex: vec3<u32>"
    return "\n".join(prelude + params + [f"{name}({args}) {{"] + body + ["}"]) + "\n"

  def render_prelude(self, uops: list[UOp]) -> list[str]:
    dts = {(u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() for u in uops}
    inf_nan = any(u.op is Ops.CONST and isinstance(u.arg, float) and not math.isfinite(u.arg) for u in uops)
    isnan = any(u.op in (Ops.MAX, Ops.CMPNE) and dtypes.is_float(u.src[0].dtype) for u in uops)
    half = [("enable f16;" if self.supports_float16 else HALF_HELPER)] if dtypes.float16 in dts else []
    return half + ([I64_HELPERS] if dts & set(WIDE) else []) + \
      (["var<private> fg_nan: u32 = 0x7fc00000u;", "var<private> fg_inf: u32 = 0x7f800000u;"] if inf_nan else []) + \
      (["fn fg_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }"] if isnan else [])
