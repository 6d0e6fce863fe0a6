"""C-style renderers: one base for C, OpenCL C and CUDA C; a dialect is tables and hooks (docs/developer/renderer.md)"""
from __future__ import annotations
import math, struct
from collections import Counter
from dataclasses import dataclass, field
from fusegrad.dtype import DType, dtypes, PtrDType, DTYPES_DICT
from fusegrad.renderer import Renderer, MachineModel
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType

def known_dtype(dt: DType) -> DType:
  """dt if it is one of fusegrad's dtypes (only their names may reach generated source), else ValueError."""
  if DTYPES_DICT.get(dt.name) != dt: raise ValueError(f"can't render unknown dtype {dt!r}")
  return dt

# each ALU op as C writes it ({0} {1} {2}: its operands); a dialect's code_for_op changes some
C_OPS = {Ops.ADD: "({0}+{1})", Ops.MUL: "({0}*{1})", Ops.FDIV: "({0}/{1})", Ops.IDIV: "({0}/{1})", Ops.MOD: "({0}%{1})",
  Ops.CMPLT: "({0}<{1})", Ops.CMPNE: "({0}!={1})", Ops.AND: "({0}&{1})", Ops.OR: "({0}|{1})", Ops.XOR: "({0}^{1})",
  Ops.SHL: "({0}<<{1})", Ops.SHR: "({0}>>{1})", Ops.MAX: "((({0})>({1})||({0})!=({0}))?({0}):({1}))",
  Ops.WHERE: "({0}?{1}:{2})", Ops.MULACC: "(({0}*{1})+{2})"}
# the libm function of each math op
MATH_FNS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}

def lane_run(stores: list[UOp], least: int) -> tuple[UOp, list[tuple[UOp, int, int]]] | None:
  """x and (vector, c0, stride) per vector when stores write every lane of vectors once, lane l of each at x + c0 +
  stride*l, into one buffer at one x and no address twice (so in any order: one loop over the lanes); else None. A
  register tile's output in lanes: compilers spent as long on its 256 stores as on the rest of the kernel."""
  if len(stores) < least: return None
  def where(s: UOp) -> tuple[UOp, UOp, int]:  # (buffer, x, c) of a store at x + c
    i = s.src[1]
    return (s.src[0], i.src[0], i.src[1].arg) if i.op is Ops.ADD and i.src[1].op is Ops.CONST else (s.src[0], i, 0)
  places = [where(s) for s in stores]
  at = {(s.src[2].src[0], s.src[2].arg): c for s, (_, _, c) in zip(stores, places)}  # (vector, lane) -> c
  vecs, n = list(dict.fromkeys(v for v, _ in at)), stores[0].src[2].src[0].dtype.count
  run = [(v, at.get((v, 0), 0), at.get((v, 1), 0) - at.get((v, 0), 0)) for v in vecs]
  if len({p[:2] for p in places}) > 1 or len(set(at.values())) < len(stores) or \
     any(v.dtype.count != n or any(at.get((v, lane)) != c0 + s * lane for lane in range(n)) for v, c0, s in run):
    return None
  return places[0][1], run

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
  # statements, as format strings: {type} and {name} of a variable, {val} its value, {size} a loop's or array's size
  decl: str = "{type} {name} = {val};"          # a value assigned once
  mutable_decl: str = "{type} {name} = {val};"  # an accumulator (ASSIGNed later)
  loop_open: str = "for ({type} {name} = 0; {name} < {size}; {name}++) {{"
  loop_close: str = "}"
  guarded: str = "if ({cond}) {stmt}"           # a store under a gate
  vector: str = "({type}){{{val}}}"             # a vector from its lanes (val: them, comma-separated)
  shuffle_def: str = ""  # where the language has it, FG_SHUFFLE(a, b, idx...): lanes idx of vectors a, b (b's from n)
  local_decl: str = "{prefix}{type} {name}[{size}];"  # shared memory (prefix: smem_prefix)
  locals_in_prelude: bool = False               # shared memory is declared outside the kernel function
  offset_addressing: bool = False               # `buf[x+c]` written `(buf+x)[c]` (render_address)
  lane_loop: str = ""  # a pragma keeping a loop rolled: vectors stored lane by lane become a loop over lanes (lane_run)
  lane_loop_min: int = 256  # the shortest run of lane stores lane_run makes a loop (CPUDevice: 128 with gcc)
  code_for_op: dict[Ops, str] = field(default_factory=lambda: dict(C_OPS))

  # *** how each op is written ***
  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return f"{self.render_dtype(dt.base)}*"
    return self.type_map.get(dt.scalar(), known_dtype(dt.scalar()).name)

  def render_const(self, val: object, dt: DType) -> str:
    if dtypes.is_float(dt):
      assert isinstance(val, float)
      if math.isnan(val): ret = "__builtin_nanf(\"\")" if dt != dtypes.float64 else "__builtin_nan(\"\")"
      elif math.isinf(val):
        ret = ("-" if val < 0 else "") + ("__builtin_inff()" if dt != dtypes.float64 else "__builtin_inf()")
      else: ret = repr(val) + ("" if dt == dtypes.float64 else "f")
      return ret if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)})({ret}))"
    if dt == dtypes.bool: return "1" if val else "0"
    assert isinstance(val, int)
    if dt in (dtypes.int64, dtypes.uint64):
      return "(-9223372036854775807ll-1)" if val == -2 ** 63 else f"{val}{'ull' if dt == dtypes.uint64 else 'll'}"
    if dt == dtypes.int32 and val == -2 ** 31: return "(-2147483647-1)"
    return f"{val}u" if dt in (dtypes.uint32, dtypes.uint16, dtypes.uint8) else str(val)

  def render_math(self, fn: str, x: str, dt: DType) -> str:
    """A libm function; types without their own version compute in float."""
    return f"__builtin_{fn}{self.fn_suffix[dt]}({x})" if dt in self.fn_suffix else f"__builtin_{fn}f((float)({x}))"

  def render_alu(self, u: UOp, src: list[str]) -> str:
    op, dt, a, b = u.op, u.dtype, src[0], src[1] if len(src) > 1 else ""
    if op in MATH_FNS: return self.render_math(MATH_FNS[op], a, dt)
    if op is Ops.RECIPROCAL: return f"({self.render_const(1.0, dt)}/{a})"
    if op is Ops.MOD and dtypes.is_float(dt):  # fmod: exact, the dividend's sign (x % 0 is nan); halves in float
      return self.render_math("fmod", f"{a}, {b}", dt if dt in (dtypes.float32, dtypes.float64) else dtypes.float32)
    # never trap on x/0 or INT_MIN/-1
    if op in (Ops.IDIV, Ops.MOD) and not (u.src[1].op is Ops.CONST and u.src[1].arg > 0):
      if dtypes.is_unsigned(dt): return f"(({b})==0?0:({a}){'/' if op is Ops.IDIV else '%'}({b}))"
      if op is Ops.IDIV: return f"(({b})==0?0:({b})==-1?(0-({a})):({a})/({b}))"
      return f"(({b})==0||({b})==-1?0:({a})%({b}))"
    if dt == dtypes.bool and op in (Ops.ADD, Ops.MUL): op = Ops.OR if op is Ops.ADD else Ops.AND  # not 1+1 == 2
    if op in self.code_for_op: return self.code_for_op[op].format(*src)
    raise NotImplementedError(f"{type(self).__name__} can't render {op}")

  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    if dt == dtypes.bool: return f"(({x})!=0)"
    # float -> int through int64 (uint64 excepted: its top half doesn't fit), so out-of-range values wrap as in PYTHON
    if dtypes.is_float(from_dt) and dtypes.is_int(dt) and dt not in (dtypes.int64, dtypes.uint64):
      x = f"(({self.render_dtype(dtypes.int64)})({x}))"
    return f"(({self.render_dtype(dt)})({x}))"

  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    return f"__builtin_bit_cast({self.render_dtype(dt)}, ({self.render_dtype(from_dt)})({x}))"

  def render_special(self, name: str) -> str: return self.special_code[name[:4]].format(int(name[4:]))

  def render_index_type(self, dt: DType) -> str:
    """Loop counters and launch indices: int32 or int64 as codegen chose (int for an unresolved index)."""
    return "int" if dt == dtypes.index else self.render_dtype(dt)

  def render_address(self, idx: UOp, buf: str, names: dict[UOp, str]) -> tuple[str, str]:
    """The pointer and index a load or store uses. With offset_addressing `x + constant` becomes `(buf+x)` and the
    constant: under -fwrapv gcc gave each `buf[x+c]` its own sign-extended pointer (spilled in hot loops); `buf+x` is
    one pointer they share, the constants displacements."""
    if self.offset_addressing and idx.op is Ops.ADD and idx.src[1].op is Ops.CONST:
      return f"({buf}+{names[idx.src[0]]})", self.render_const(idx.src[1].arg, idx.src[1].dtype)
    return buf, names[idx] if idx.op is not Ops.CONST else self.render_const(idx.arg, idx.dtype)
  def render_load(self, u: UOp, buf: str, idx: str) -> str: return f"{buf}[{idx}]"
  def render_store(self, u: UOp, buf: str, idx: str, val: str) -> str: return f"{buf}[{idx}] = {val};"

  def render_buffer_param(self, name: str, dt: DType, index: int, written: bool) -> str:
    """A kernel parameter for buffer number index (written: the kernel stores to it)."""
    return f"{self.buffer_prefix}{'' if written else 'const '}{self.render_dtype(dt)}{self.buffer_suffix} {name}"
  def render_var_param(self, name: str, index: int) -> str:
    """A kernel parameter for an int variable, parameter number index."""; return f"{self.arg_int_prefix} {name}"

  def render_kernel(self, name: str, params: list[str], body: list[str], prelude: list[str]) -> str:
    return "\n".join(prelude + [f"{self.kernel_prefix}void {name}({', '.join(params)}) {{"] + body + ["}"]) + "\n"

  def render_prelude(self, uops: list[UOp]) -> list[str]: return []
  def prefetch_bytes(self, uops: list[UOp]) -> int:
    """How far ahead of each vector load in a loop the kernel asks for memory (0: it doesn't), for loads that range over
    more than the L2 (the others hit in cache)."""
    return 0
  def render_thread_loop(self, name: str, params: list[str], var: str, size: str,
                         inner: list[str]) -> tuple[list[str], list[str]]:
    """A loop run on several threads (var: its counter's type and name; inner: body lines): (its lines, functions)."""
    raise NotImplementedError(f"{type(self).__name__} has no threaded loops")

  def render_kernel_name(self, name: str, uops: list[UOp]) -> str:
    """The kernel's name as its signature declares it (CUDA puts __launch_bounds__ in front)."""; return name

  # *** the program ***
  def render(self, name: str, uops: list[UOp]) -> str:
    names: dict[UOp, str] = {}
    uses = Counter(s for u in uops for s in u.src)
    written, casted = {u.src[0] for u in uops if u.op is Ops.STORE}, {u.src[0] for u in uops if u.op is Ops.CAST}
    params, body = list[str](), list[str]()
    depth, counter = 1, Counter[str]()
    thread_loop: tuple[str, str, int] | None = None  # (variable, size, first body line) of a loop split across threads
    helpers: list[str] = []  # functions the kernel calls, rendered before it
    local_decls: list[str] = []  # shared memory declared outside the function (locals_in_prelude)
    prefetch = self.prefetch_bytes(uops)
    def new_name(prefix: str) -> str:
      counter[prefix] += 1
      return f"{prefix}{counter[prefix] - 1}"
    pending: list[UOp] = []  # stores of vectors' lanes, no line between: one loop over lanes where lane_run finds one
    def line(s: str) -> None:
      if pending: flush()
      body.append("  " * depth + s)
    def store(u: UOp) -> None:
      src = [names[s] if s.op is not Ops.CONST else self.render_const(s.arg, s.dtype) for s in u.src]
      stmt = self.render_store(u, *self.render_address(u.src[1], src[0], names), src[2])
      line(stmt if len(src) == 3 else self.guarded.format(cond=src[3], stmt=stmt))
    def flush() -> None:
      stores = pending[:]
      pending.clear()
      if (found := lane_run(stores, self.lane_loop_min)) is None:
        for u in stores: store(u)
      else:
        (x, run), lane, tmp = found, new_name("lane"), new_name("lanes")
        dt, ptr = stores[0].src[2].src[0].dtype, f"({names[stores[0].src[0]]}+{names[x]})"
        # the vectors copied to an array (a lane picked by a variable would keep the accumulators in memory throughout)
        line(f"{self.render_dtype(dt)} {tmp}[{len(run)}] = {{{', '.join(names[v] for v, _, _ in run)}}};")
        line(self.lane_loop)
        line(self.loop_open.format(type="int", name=lane, size=dt.count))
        for k, (_, c0, stride) in enumerate(run):
          line("  " + self.render_store(stores[0], ptr, f"{c0}+{stride}*{lane}", f"{tmp}[{k}][{lane}]"))
        line(self.loop_close)
    blocks: dict[tuple[UOp, ...], list[str]] = {}  # the transposes rendered in this loop body, by row
    def transposed(u: UOp) -> str | None:
      """Lane i of n vectors of n lanes (a tile read across the axis it's written along): row i of their transpose,
      rendered once in n log2(n) two-vector shuffles, each stage swapping the off-diagonal s x s blocks of 2s x 2s."""
      n, vs = u.dtype.count, tuple(x.src[0] if x.op is Ops.GEP and x.arg == u.src[0].arg else x for x in u.src)
      if not self.shuffle_def or n & (n - 1) or u.dtype.scalar().itemsize != 4 or len(set(vs)) < n or \
         any(v.dtype != u.dtype for v in vs): return None  # (4-byte lanes: the int mask of gcc's shuffle)
      rows, s, dt = blocks.get(vs) or [names[v] for v in vs], n // 2, self.render_dtype(u.dtype)
      if self.shuffle_def not in helpers: helpers.append(self.shuffle_def)
      while vs not in blocks and s:
        lo = [j if not j & s else n + j - s for j in range(n)]  # row k's lanes (row k + s: each + s)
        for k, a, b in [(k, rows[k], rows[k + s]) for k in range(n) if not k & s]:
          for dst, idx in ((k, lo), (k + s, [x + s for x in lo])):
            rows[dst] = new_name("tr")
            line(self.decl.format(type=dt, name=rows[dst], val=f"FG_SHUFFLE({a}, {b}, {str(idx)[1:-1]})"))
        s //= 2
      return blocks.setdefault(vs, rows)[u.src[0].arg]
    for u in uops:
      lane_store = self.lane_loop and u.op is Ops.STORE and len(u.src) == 3 and u.src[2].op is Ops.GEP
      if pending and u.op in (Ops.RANGE, Ops.ENDRANGE): flush()
      if u.op in (Ops.RANGE, Ops.ENDRANGE, Ops.ASSIGN): blocks.clear()  # (a new scope, or an accumulator changed)
      src = [names[s] if s.op is not Ops.CONST else self.render_const(s.arg, s.dtype) for s in u.src]
      if u.op is Ops.DEFINE_GLOBAL:
        names[u] = f"data{u.arg}"
        params.append(self.render_buffer_param(names[u], u.dtype, len(params), u in written))
      elif u.op is Ops.DEFINE_VAR:  # user-named: rendered under a generated name (the name is a comment at most)
        names[u] = new_name("var")
        params.append(self.render_var_param(names[u], len(params)))
      elif u.op is Ops.SPECIAL:
        names[u] = u.arg[0]
        line(self.decl.format(type=self.render_index_type(u.dtype), name=names[u], val=self.render_special(u.arg[0]))
             + f" /* {u.arg[1]} */")
      elif u.op is Ops.CONST: names[u] = self.render_const(u.arg, u.dtype)
      elif u.op is Ops.RANGE:
        names[u], counter_type = f"ridx{u.arg[0]}", self.render_index_type(u.dtype)
        if u.arg[1] is AxisType.THREAD: thread_loop = (f"{counter_type} {names[u]}", src[0], len(body))
        else:  # the counter has the kernel's index type: int64 where an index can pass 2**31
          line(self.loop_open.format(type=counter_type, name=names[u], size=src[0]))
          depth += 1
      elif u.op is Ops.ENDRANGE:
        if u.src[0].arg[1] is AxisType.THREAD:
          assert thread_loop is not None
          loop, funcs = self.render_thread_loop(name, params, thread_loop[0], thread_loop[1], body[thread_loop[2]:])
          body, helpers = body[:thread_loop[2]] + loop, helpers + funcs
        else:
          depth -= 1
          line(self.loop_close)
      elif u.op is Ops.DEFINE_LOCAL:
        names[u] = u.arg[0]
        decl = self.local_decl.format(prefix=self.smem_prefix, type=self.render_dtype(u.dtype.base),  # type: ignore
                                      name=u.arg[0], size=u.arg[1])
        if self.locals_in_prelude: local_decls.append(decl)
        else: line(decl)
      elif u.op is Ops.BARRIER:
        names[u] = ""
        line(self.barrier)
      elif u.op is Ops.LOAD:
        names[u] = new_name("val")
        addr = self.render_address(u.src[1], src[0], names)
        if prefetch and depth > 1 and u.dtype.count > 1 and u.src[1].vmax * u.dtype.scalar().itemsize > self.machine.l2:
          line(f"__builtin_prefetch({addr[0]}+{addr[1]}+{prefetch // u.dtype.scalar().itemsize});")
        access = self.render_load(u, *addr)
        # other extras order only (BARRIER)
        gate = next((n for x, n in zip(u.src[2:], src[2:]) if x.dtype == dtypes.bool), None)
        zero = self.render_const(0.0 if dtypes.is_float(u.dtype) else 0, u.dtype)
        val = access if gate is None else self.code_for_op[Ops.WHERE].format(gate, access, zero)
        line(self.decl.format(type=self.render_dtype(u.dtype), name=names[u], val=val))
      elif u.op is Ops.STORE:
        names[u] = ""  # a BARRIER lists the stores it waits for
        if lane_store: pending.append(u)
        else: store(u)
      elif u.op is Ops.DEFINE_ACC:
        names[u] = new_name("acc")
        line(self.mutable_decl.format(type=self.render_dtype(u.dtype), name=names[u], val=src[0]))
      elif u.op is Ops.ASSIGN: line(f"{src[0]} = {src[1]};")
      elif u.op is Ops.VECTORIZE and (row := transposed(u)) is not None: names[u] = row
      elif u.op is Ops.VECTORIZE:
        names[u] = new_name("vec")
        vec = self.vector.format(type=self.render_dtype(u.dtype), val=", ".join(src))
        line(self.decl.format(type=self.render_dtype(u.dtype), name=names[u], val=vec))
      elif u.op is Ops.GEP: names[u] = f"{src[0]}[{u.arg}]"
      elif u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST):
        if u.op is Ops.CAST: expr = self.render_cast(src[0], u.dtype, u.src[0].dtype)
        elif u.op is Ops.BITCAST: expr = self.render_bitcast(src[0], u.dtype, u.src[0].dtype)
        else: expr = self.render_alu(u, src)
        # small int expressions used once are inline; a variable for each float (it rounds), int narrower than C's int
        # (only the assignment wraps), and bool made a number (gcc jumps on `(float)(a!=b)`: max pool's grad 20x slower)
        inline_ok = (dtypes.is_int(u.dtype) and u.dtype.itemsize >= 4) or (u.dtype == dtypes.bool and u not in casted)
        if uses[u] == 1 and inline_ok and u.op not in (Ops.MAX, Ops.IDIV, Ops.MOD, Ops.BITCAST): names[u] = expr
        else:
          names[u] = new_name("alu" if u.op in GroupOp.ALU else "cast")
          line(self.decl.format(type=self.render_dtype(u.dtype), name=names[u], val=expr))
      else: raise NotImplementedError(f"{type(self).__name__} can't render {u.op}")
    if pending: flush()
    prelude = self.render_prelude(uops) + local_decls + helpers
    return self.render_kernel(self.render_kernel_name(name, uops), params, body, prelude)

# 2**f for f in [-0.5, 0.5]: its Taylor series to degree 7 (coefficients ln(2)**k / k!, rounded to float), within
# 0.2 ulp of float; with the rounding of Horner's steps the result is within 2 ulp of exp2f
EXP2_COEFFS = ("1.5252733646775596e-05f", "0.0001540352968731895f", "0.0013333557872101665f", "0.009618128649890423f",
               "0.05550410971045494f", "0.24022650718688965f", "0.6931471824645996f", "1.0f")

def _horner(coeffs: tuple[str, ...], var: str) -> str:
  """The C expression of a polynomial in var, highest coefficient first, in Horner form."""
  poly = coeffs[0]
  for c in coeffs[1:]: poly = f"({poly}*{var} + {c})"
  return poly

def _once(guard: str, code: str) -> str:
  """code defined once in a translation unit that joins several kernels using it (Compiler.start_batch)."""
  return f"#ifndef {guard}\n#define {guard}\n{code}\n#endif"

def vector_exp2(t: str) -> str:
  """A C function computing exp2 on a vector of floats (type t) with vector instructions only (libm's exp2f is a call
  per element): x = n + f with n an integer (rounded by adding and subtracting 1.5 * 2**23) and |f| <= 0.5, 2**f by a
  polynomial, times 2**n built from its bits in two halves (so that results down to the smallest denormal and up to
  the largest float round once). x is clamped to [-150, 128] first (0 and inf outside), NaN stays NaN."""
  poly = _horner(EXP2_COEFFS, "f")
  return "\n".join([f"static inline {t} fg_exp2_{t}({t} x) {{",
    "  typedef __typeof__(x < x) I;  /* the int vector of the same shape */",
    f"  const {t} zero = ({t}){{0}};",
    "  I lo = x < -150.0f, hi = x > 128.0f;",
    f"  x = ({t})(((I)x & ~(lo | hi)) | ((I)(zero - 150.0f) & lo) | ((I)(zero + 128.0f) & hi));",
    f"  {t} r = (x + 12582912.0f) - 12582912.0f;",
    f"  {t} f = x - r;",
    f"  {t} p = {poly};",
    f"  I n = __builtin_convertvector(({t})((I)r & (r == r)), I);  /* nan: 0 (p is nan) */",
    "  I n1 = n >> 1, n2 = n - n1;",
    f"  return p * ({t})((n1 + 127) << 23) * ({t})((n2 + 127) << 23);", "}"])

# log2(m) = 2*atanh(s)/ln(2) with s = (m-1)/(m+1): its series to s**11 (coefficients 2/ln(2)/(2k+1)), in double
LOG2_COEFFS = ("0.2623081892525388", "0.3205988979753252", "0.4121985831111324", "0.5770780163555853",
               "0.9617966939259756", "2.8853900817779268")

def vector_log2(t: str) -> str:
  """A C function computing log2 on a vector of floats (type t) with vector instructions only: x = m * 2**e with m in
  [sqrt(1/2), sqrt(2)) from its bits (denormals scaled by 2**23 first), log2(m) by a series in s = (m-1)/(m+1) (|s| <
  0.172) in double, so the result rounds once to float; plus e. 0 gives -inf, inf gives inf, negatives and NaN NaN."""
  poly = _horner(LOG2_COEFFS, "s2")
  return "\n".join([f"static inline {t} fg_log2_{t}({t} x) {{",
    "  typedef __typeof__(x < x) I;  /* the int vector of the same shape */",
    f"  typedef double D __attribute__((vector_size(2 * sizeof({t}))));",
    f"  const {t} zero = ({t}){{0}};",
    "  I sub = x < 1.17549435e-38f;  /* denormal (or not positive): scaled up by 2**23 */",
    "  I bits = ((I)(x * 8388608.0f) & sub) | ((I)x & ~sub);",
    "  I e = ((bits >> 23) & 255) - 127 - (sub & 23);",
    f"  {t} m = ({t})((bits & 8388607) | 1065353216);  /* in [1, 2) */",
    "  I big = m > 1.41421356f;",
    f"  m = ({t})(((I)(m * 0.5f) & big) | ((I)m & ~big));",
    "  D u = __builtin_convertvector(m, D) - 1.0, s = u / (u + 2.0), s2 = s * s;",
    f"  {t} r = __builtin_convertvector(__builtin_convertvector(e - big, D) + s * {poly}, {t});",
    "  I zero_in = x == 0.0f, inf_in = x == __builtin_inff(), nan_out = (x < 0.0f) | (x != x);",
    f"  r = ({t})(((I)r & ~(zero_in | inf_in | nan_out)) | ((I)(zero - __builtin_inff()) & zero_in)"
    " | ((I)(zero + __builtin_inff()) & inf_in));",
    f"  return ({t})(((I)r & ~nan_out) | ((I)(zero + __builtin_nanf(\"\")) & nan_out));", "}"])

@dataclass(frozen=True)
class ClangRenderer(CStyleLanguage):
  """C for the CPU backend, compiled by clang or gcc (half is __fp16 with clang, _Float16 with gcc)."""
  device: str = "CPU"
  shuffle_def: str = "\n".join([  # clang's builtin or gcc's (its __builtin_shufflevector is gcc 12's)
    "#ifdef __clang__", "#define FG_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)", "#else",
    "#define FG_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (int __attribute__((vector_size(sizeof(a))))){__VA_ARGS__})",
    "#endif"])
  half_type: str = "_Float16"
  offset_addressing: bool = True
  lane_loop: str = "#pragma GCC unroll 1"  # (gcc's and clang's)
  def render_dtype(self, dt: DType) -> str:
    if isinstance(dt, PtrDType): return f"{self.render_dtype(dt.base)}*"
    name = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
            dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
            dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: self.half_type,
            dtypes.float32: "float", dtypes.float64: "double"}[known_dtype(dt.scalar())]
    if dt.count > 1 and dt.scalar() == dtypes.bool: return f"fg_mask{dt.count}"
    return name if dt.count == 1 else f"{name.replace('unsigned ', 'u').replace('signed ', 's')}{dt.count}"  # typedefs
  def render_const(self, val: object, dt: DType) -> str:
    if dt.count == 1: return super().render_const(val, dt)
    if dt.scalar() == dtypes.bool:  # a mask: all ones for true
      return f"(({self.render_dtype(dt)}){{{', '.join(['-1' if val else '0'] * dt.count)}}})"
    return f"(({self.render_dtype(dt)}){{{', '.join([super().render_const(val, dt.scalar())] * dt.count)}}})"
  def render_prelude(self, uops: list[UOp]) -> list[str]:
    """The GNU vector types the kernel uses (gcc and clang), an unaligned variant for loads and stores, and the vector
    exp2 and log2 functions it calls. A bool vector is a mask: what comparing float vectors gives, an int of all ones
    (true) or zeros per lane."""
    vecs = sorted({u.dtype for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)})
    masks = [dt for dt in vecs if dt.scalar() == dtypes.bool]
    fns = sorted({(u.op is Ops.LOG2, u.dtype) for u in uops
                  if u.op in (Ops.EXP2, Ops.LOG2) and u.dtype.count > 1 and u.dtype.scalar() == dtypes.float32})
    return [f"typedef {self.render_dtype(dt.scalar())} {self.render_dtype(dt)}{sfx} "
            f"__attribute__((vector_size({dt.itemsize}){align}));"
            for dt in vecs if dt not in masks
            for sfx, align in (("", ""), ("_u", f", aligned({dt.scalar().itemsize})"))] + \
      [f"typedef int {self.render_dtype(dt)} __attribute__((vector_size({4 * dt.count})));" for dt in masks] + \
      [_once(f"FG_{'LOG2' if log else 'EXP2'}_{self.render_dtype(dt)}", (vector_log2 if log else vector_exp2)(
        self.render_dtype(dt))) for log, dt in fns]
  def render(self, name: str, uops: list[UOp]) -> str:
    """A register tile (accumulators filling half the vector registers or more) is compiled with gcc's short loops
    unrolled whole and without the passes that make it spill or that it doesn't gain from (clang ignores the pragmas;
    each pass and its measurements: docs/developer/codegen.md, "gcc's options for register tiles")."""
    acc_bytes = sum(u.dtype.itemsize for u in uops if u.op is Ops.DEFINE_ACC)
    if not self.machine.register_tile(acc_bytes): return super().render(name, uops)
    opts = ('"no-tree-loop-vectorize", "no-tree-loop-im", "no-gcse", "peel-loops", "no-tree-pre", "no-tree-dse", '
            '"no-schedule-insns2", "no-tree-vrp", "no-code-hoisting", "no-rerun-cse-after-loop"')
    return f"#pragma GCC push_options\n#pragma GCC optimize({opts})\n" + super().render(name, uops) + \
      "#pragma GCC pop_options\n"
  def render_alu(self, u: UOp, src: list[str]) -> str:
    """Vectors: MAX as a bitwise select (C has no ?: on vectors), float exp2 and log2 as vector_exp2 and vector_log2,
    other math lane by lane."""
    dt = u.dtype
    if u.op is Ops.MAX and dt.count == 1 and dtypes.is_float(dt):  # the max, then the NaN test: gcc compiles that to
      a, b = src  # maxss and a blend, but jumps on `a > b || a != a` (a mispredicted jump per 2x2 max pool: 2x slower)
      return f"({{{self.render_dtype(dt)} m_ = {a} > {b} ? {a} : {b}; {a} != {a} ? {a} : m_;}})"
    if u.op is Ops.WHERE and dt == dtypes.float32:  # the bits of a or b by a mask: gcc jumps on a float `c ? a : b`
      c, a, b = src  # (a mispredicted jump per element of a max pool's gradient: 4x slower)
      ia, ib = (self.render_bitcast(v, dtypes.int32, dt) for v in (a, b))
      return self.render_bitcast(f"{ib} ^ (({ia} ^ {ib}) & -(int)({c}))", dt, dtypes.int32)
    if u.op is Ops.WHERE and u.src[0].dtype.count > 1:  # a mask's lanes pick the bits of one value or the other
      m, a, b = src
      return f"({self.render_dtype(dt)})(({m} & (fg_mask{dt.count}){a}) | (~{m} & (fg_mask{dt.count}){b}))"
    if dt.count == 1 or (u.op is not Ops.MAX and u.op not in MATH_FNS): return super().render_alu(u, src)
    if u.op is Ops.MAX:  # (a > b or a is nan) ? a : b in each lane; a cast between vector types keeps the bits
      a, b = src
      return (f"({{__typeof__({a} > {b}) m_ = ({a} > {b}) | ({a} != {a}); "
              f"({self.render_dtype(dt)})((m_ & (__typeof__(m_)){a}) | (~m_ & (__typeof__(m_)){b}));}})")
    if u.op in (Ops.EXP2, Ops.LOG2) and dt.scalar() == dtypes.float32:
      return f"fg_{MATH_FNS[u.op]}_{self.render_dtype(dt)}({src[0]})"
    lanes = ", ".join(self.render_math(MATH_FNS[u.op], f"{src[0]}[{i}]", dt.scalar()) for i in range(dt.count))
    return f"(({self.render_dtype(dt)}){{{lanes}}})"
  def prefetch_bytes(self, uops: list[UOp]) -> int:
    """A quarter of the L1 where the kernel computes vector exp2 or log2 (softmax's sum of exp): the hardware prefetcher
    falls behind a loop that spends this long on each cache line (about 40 instructions per AVX2 vector: the reorder
    buffer holds loads of 5 lines ahead, not enough to hide memory's latency; docs/developer/codegen.md)."""
    return self.machine.l1d // 4 if any(u.op in (Ops.EXP2, Ops.LOG2) and u.dtype.count > 1 for u in uops) else 0
  def render_load(self, u: UOp, buf: str, idx: str) -> str:
    if u.dtype.count == 1: return super().render_load(u, buf, idx)
    return f"*((const {self.render_dtype(u.dtype)}_u*)({buf}+{idx}))"
  def render_store(self, u: UOp, buf: str, idx: str, val: str) -> str:
    if u.src[2].dtype.count == 1: return super().render_store(u, buf, idx, val)
    return f"*(({self.render_dtype(u.src[2].dtype)}_u*)({buf}+{idx})) = {val};"
  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    # clang's double -> __fp16 calls a runtime helper whose ABI libgcc doesn't share (garbage results): via float
    if self.half_type == "__fp16" and dt.scalar() == dtypes.float16 and from_dt.scalar() == dtypes.float64:
      return f"(({self.half_type})((float)({x})))"
    if dt.count > 1: return f"__builtin_convertvector({x}, {self.render_dtype(dt)})"
    if dt == dtypes.float32 and from_dt == dtypes.bool:  # 1.0f's bits or 0: clang (AVX2) vectorizes the comparisons,
      # then sets each float from a jump per mask bit (max pool's gradient: 3.5x slower, mispredicted jumps)
      return self.render_bitcast(f"-(int)({x}) & 0x3f800000", dt, dtypes.int32)
    return super().render_cast(x, dt, from_dt)
  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    t, f = self.render_dtype(dt), self.render_dtype(from_dt)
    return f"({{union {{ {f} a; {t} b; }} u_; u_.a = ({f})({x}); u_.b;}})"
  def render_thread_loop(self, name: str, params: list[str], var: str, size: str,
                         inner: list[str]) -> tuple[list[str], list[str]]:
    """An OpenMP loop calling the body in a function of its own: there the pointers stay `restrict` and the compiler
    vectorizes as it would without threads. The counter arrives as `{counter}_` and is taken modulo the loop's size
    (unsigned), which changes nothing but tells the compiler its range: with -fwrapv and an index of unknown range the
    index math stays 32-bit, each load sign-extends its own index and the registers spill (see codegen.md)."""
    args, counter = ", ".join(p.split()[-1] for p in params), var.split()[-1]
    ctype = var[:-len(counter)].strip()
    body_fn = ([f"static __attribute__((noinline)) void {name}_body({', '.join(params + [f'const {var}_'])}) {{",
                f"  const {var} = ({ctype})((unsigned {ctype}){counter}_ % (unsigned {ctype})({size}));"]
               + inner + ["}"])
    loop = [f"  #pragma omp parallel for num_threads({self.threads})",
            f"  for ({var} = 0; {counter} < {size}; {counter}++) {name}_body({args}, {counter});"]
    return loop, body_fn

@dataclass(frozen=True)
class CUDARenderer(CStyleLanguage):
  """CUDA C for NVRTC or nvcc: one `extern "C" __global__` function per kernel, gidx/lidx from blockIdx/threadIdx.
  half and bfloat16 are cuda_fp16.h's and cuda_bf16.h's types; their math runs in float."""
  device: str = "CUDA"
  has_local: bool = True
  has_shared: bool = True
  global_max: tuple[int, ...] | None = (2 ** 31 - 1, 65535, 65535)
  local_max: tuple[int, ...] | None = (1024, 1024, 64)
  max_workgroup: int = 1024
  shared_max: int = 48 * 1024
  # warps of 32 threads, 48 KB of shared memory per block, up to 255 32-bit registers per thread (every CUDA GPU)
  machine: MachineModel = MachineModel(isa="cuda", vector_bytes=4, vector_registers=255, warp_size=32,
                                       local_memory=48 * 1024)
  supports_bfloat16: bool = True
  kernel_prefix: str = 'extern "C" __global__ '
  buffer_suffix: str = " __restrict__"
  smem_prefix: str = "__shared__ "
  barrier: str = "__syncthreads();"
  type_map: dict[DType, str] = field(default_factory=lambda: {
    dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.bfloat16: "__nv_bfloat16",
    dtypes.float32: "float", dtypes.float64: "double"})

  def render_const(self, val: object, dt: DType) -> str:
    if not (dtypes.is_float(dt) and isinstance(val, float) and not math.isfinite(val)):
      return super().render_const(val, dt)
    # NVRTC has no __builtin_nan/__builtin_inf: build them from their bits
    nan = math.isnan(val)
    if dt == dtypes.float64: ret = f"__longlong_as_double({'0x7ff8000000000000' if nan else '0x7ff0000000000000'}ll)"
    else: ret = f"__int_as_float({'0x7fc00000' if nan else '0x7f800000'})"
    ret = f"(-{ret})" if val < 0 else ret
    return ret if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)})({ret}))"

  def render_math(self, fn: str, x: str, dt: DType) -> str:
    """exp2f/exp2 and friends; other types compute in float and convert back."""
    if dt == dtypes.float64: return f"{fn}({x})"
    return f"{fn}f({x})" if dt == dtypes.float32 else f"(({self.render_dtype(dt)})({fn}f((float)({x}))))"

  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    # half and bfloat16 convert through float (exact); integers become them through double (one rounding, as in PYTHON)
    low = (dtypes.float16, dtypes.bfloat16)
    if from_dt in low and dt != from_dt: x, from_dt = f"((float)({x}))", dtypes.float32
    elif dt in low and not dtypes.is_float(from_dt): x, from_dt = f"((double)({x}))", dtypes.float64
    return super().render_cast(x, dt, from_dt)

  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    return f"fg_bitcast<{self.render_dtype(dt)}, {self.render_dtype(from_dt)}>({x})"

  def render_special(self, name: str) -> str:
    return f"{'blockIdx' if name.startswith('gidx') else 'threadIdx'}.{'xyz'[int(name[4:])]}"

  def render_kernel_name(self, name: str, uops: list[UOp]) -> str:
    threads = math.prod(u.arg[1] for u in uops if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"))
    return f"__launch_bounds__({threads}) {name}"

  def render_prelude(self, uops: list[UOp]) -> list[str]:
    dts = {u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype for u in uops}
    prelude = ["#include <cuda_fp16.h>"] if dtypes.float16 in dts else []
    if dtypes.bfloat16 in dts: prelude.append("#include <cuda_bf16.h>")
    if any(u.op is Ops.BITCAST for u in uops):  # memcpy: a bitcast without undefined behaviour, compiled to a move
      prelude.append("template <class T, class F> __device__ __forceinline__ T fg_bitcast(F x) "
                     "{ T r; memcpy(&r, &x, sizeof(T)); return r; }")
    return prelude

def _as_half(val: float) -> float:
  """val rounded to the nearest half (to nearest even; too large for half: infinity)."""
  if not math.isfinite(val): return val
  try: return struct.unpack("e", struct.pack("e", val))[0]
  except OverflowError: return math.copysign(math.inf, val)

# OpenCL C without cl_khr_fp16 still has half pointers and vload_half/vstore_half: these round a float to half
HALF_HELPERS = [
  "float fg_half(float x) { ushort b; vstore_half_rte(x, 0, (__private half*)&b); "
  "return vload_half(0, (__private half*)&b); }",
  "ushort fg_half_bits(float x) { ushort b; vstore_half_rte(x, 0, (__private half*)&b); return b; }",
  "float fg_bits_half(ushort b) { return vload_half(0, (__private half*)&b); }"]

@dataclass(frozen=True)
class OpenCLRenderer(CStyleLanguage):
  """OpenCL C: `__kernel` functions with `__global` buffers; gidx/lidx are get_group_id/get_local_id; bool buffers are
  uchar, double needs cl_khr_fp64, half without cl_khr_fp16 is a storage format (docs/developer/renderer.md)."""
  device: str = "CL"
  has_local: bool = True
  has_shared: bool = True
  kernel_prefix: str = "__kernel "
  buffer_prefix: str = "__global "
  smem_prefix: str = "__local "
  barrier: str = "barrier(CLK_LOCAL_MEM_FENCE);"
  special_code: dict[str, str] = field(default_factory=lambda: {"gidx": "(int)get_group_id({})",
                                                                 "lidx": "(int)get_local_id({})"})

  def _emulated(self, dt: DType) -> bool: return not self.supports_float16 and dt.scalar() == dtypes.float16

  def render_dtype(self, dt: DType) -> str:
    """fusegrad's dtype names are OpenCL's (char, uchar, ..., long, ulong, half); a bool buffer is a uchar pointer."""
    if isinstance(dt, PtrDType) and dt.base == dtypes.bool: return "uchar*"
    if isinstance(dt, PtrDType) and dt.base == dtypes.float16: return "half*"
    return "float" if self._emulated(dt) else super().render_dtype(dt)

  def render_const(self, val: object, dt: DType) -> str:
    if self._emulated(dt) and isinstance(val, float): return self.render_const(_as_half(val), dtypes.float32)
    if dtypes.is_float(dt) and isinstance(val, float) and (math.isnan(val) or math.isinf(val)):
      ret = "NAN" if math.isnan(val) else ("-INFINITY" if val < 0 else "INFINITY")
      return ret if dt == dtypes.float32 else f"(({self.render_dtype(dt)})({ret}))"
    if dt in (dtypes.int64, dtypes.uint64) and isinstance(val, int):  # OpenCL's long is 64 bits, `long long` reserved
      return "(-9223372036854775807L-1)" if val == -2 ** 63 else f"{val}{'UL' if dt == dtypes.uint64 else 'L'}"
    return super().render_const(val, dt)

  def render_alu(self, u: UOp, src: list[str]) -> str:
    # integers can't be NaN: no x!=x test (clang warns about it)
    if u.op is Ops.MAX and not dtypes.is_float(u.dtype): return f"(({src[0]})>({src[1]})?({src[0]}):({src[1]}))"
    ret = super().render_alu(u, src)
    return f"fg_half({ret})" if self._emulated(u.dtype) else ret

  def render_math(self, fn: str, x: str, dt: DType) -> str:
    """OpenCL's math builtins are overloaded for half, float and double; integers compute in float."""
    return f"{fn}({x})" if dtypes.is_float(dt) else f"{fn}((float)({x}))"

  def render_cast(self, x: str, dt: DType, from_dt: DType) -> str:
    if self._emulated(from_dt): from_dt = dtypes.float32  # the value is a float already
    if self._emulated(dt):  # ints up to half's range are exact in float, larger ones become infinity either way
      return f"fg_half({x})" if dtypes.is_float(from_dt) or from_dt == dtypes.bool else f"fg_half((float)({x}))"
    return super().render_cast(x, dt, from_dt)

  def render_bitcast(self, x: str, dt: DType, from_dt: DType) -> str:
    if self._emulated(dt): return f"fg_bits_half(as_ushort(({self.render_dtype(from_dt)})({x})))"
    if self._emulated(from_dt): return f"as_{self.render_dtype(dt)}(fg_half_bits({x}))"
    return f"as_{self.render_dtype(dt)}(({self.render_dtype(from_dt)})({x}))"

  def render_load(self, u: UOp, buf: str, idx: str) -> str:
    if self._emulated(u.dtype) and u.src[0].op is Ops.DEFINE_GLOBAL: return f"vload_half({idx}, {buf})"
    return super().render_load(u, buf, idx)

  def render_store(self, u: UOp, buf: str, idx: str, val: str) -> str:
    if self._emulated(u.src[2].dtype) and u.src[0].op is Ops.DEFINE_GLOBAL:
      return f"vstore_half_rte({val}, {idx}, {buf});"
    return super().render_store(u, buf, idx, val)

  def render_prelude(self, uops: list[UOp]) -> list[str]:
    used = {(u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype).scalar() for u in uops}
    if dtypes.float64 in used and not self.supports_float64:
      raise NotImplementedError(f"device {self.device} can't run float64 kernels: it lacks the cl_khr_fp64 extension")
    prelude = []
    if dtypes.float16 in used:
      prelude += ["#pragma OPENCL EXTENSION cl_khr_fp16 : enable"] if self.supports_float16 else HALF_HELPERS
    if dtypes.float64 in used: prelude.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    return prelude
