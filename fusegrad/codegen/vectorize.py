"""Vectors: vectorize_upcasts makes an UPCAST range the output is contiguous along one vector value; devectorize splits
the vectors a renderer can't hold into one scalar per lane (docs/developer/codegen.md, passes 3a and 5b)."""
from __future__ import annotations
from fusegrad.dtype import DType, dtypes
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import UOp, Ops, AxisType, GroupOp, bottom_up
from fusegrad.uop.symbolic import simplify
from fusegrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from fusegrad.codegen.kernel import range_kind, range_size, index_stride, reduce_parts
from fusegrad.codegen.expand import tree_reduce

VECTOR_DTYPES = (dtypes.float32, dtypes.float64)
BYTES = (dtypes.uint8, dtypes.int8)  # loaded as vectors where a cast to float32 reads them
TRANSPOSED = (4, 8, 16)  # the lengths of the other axis a gathering load may read its vectors along (transposed)
_RECURSED = VECTOR_DTYPES + (dtypes.bool,)  # vec reads the sources of ALU ops of these (bottom_up: deep chains)

def vector_load(u: UOp, r: UOp) -> UOp:
  """LOAD u (contiguous in r) as one vector of r's size, read from where r is 0."""
  base = simplify(u.src[1].substitute({r: UOp.const(r.dtype, 0)}))
  return UOp(Ops.LOAD, u.dtype.vec(range_size(r)), (u.src[0], base) + u.src[2:], u.arg)

def is_contiguous(access: UOp, r: UOp) -> bool:
  """A LOAD or STORE moves by one element as r grows by one, and no gate of it depends on r."""
  gates = access.src[2:] if access.op is Ops.LOAD else access.src[3:]
  return index_stride(access.src[1], r) == 1 and not any(r in g.toposort() for g in gates)

def _lanes(u: UOp, r: UOp) -> list[UOp]: return [u.substitute({r: UOp.const(r.dtype, i)}) for i in range(range_size(r))]
def broadcast(u: UOp, n: int) -> UOp: return UOp(Ops.VECTORIZE, u.dtype.vec(n), (u,) * n)

class _Vectorizer:
  """The values of one kernel as vectors along range r (memoized: shared nodes stay shared)."""
  def __init__(self, r: UOp):
    self.r, self.n = r, range_size(r)
    self.memo: dict[UOp, UOp] = {}
    self.shuffled: set[UOp] = set()  # VECTORIZEs of lanes of vector loads (transposed): vectors worth computing on

  def vec(self, u: UOp) -> UOp:
    """u as a vector of n lanes, or u itself where it does not depend on r (a scalar, the same in every lane)."""
    if (ret := self.memo.get(u)) is not None: return ret
    bottom_up(u, self.vec, lambda n: n not in self.memo and n.op in GroupOp.ALU and n.dtype in _RECURSED)
    if self.r not in u.toposort(): ret = u
    elif u.dtype == dtypes.bool and (m := self.mask(u)) is not None: ret = m
    elif u.op is Ops.WHERE and u.dtype == dtypes.float32 and (w := self.where(u)) is not None: ret = w
    elif u.dtype not in VECTOR_DTYPES: ret = self.by_lane(u)
    elif u.op is Ops.LOAD and is_contiguous(u, self.r): ret = vector_load(u, self.r)
    elif u.op is Ops.CAST and u.src[0].op is Ops.LOAD and u.src[0].dtype in BYTES and is_contiguous(u.src[0], self.r):
      ret = UOp(Ops.CAST, u.dtype.vec(self.n), (vector_load(u.src[0], self.r),))  # raw pixels: n bytes in one load
    elif u.op in GroupOp.Vector and self.any_real([self.vec(s) for s in u.src]):
      ret = UOp(u.op, u.dtype.vec(self.n), tuple(self.full(self.vec(s)) for s in u.src), u.arg)
    elif u.op is Ops.LOAD and (t := self.transposed(u)) is not None: ret = t
    elif u.op is Ops.REDUCE and u.arg in GroupOp.Vector and self.any_real([self.vec(s) for s in reduce_parts(u)[0]]):
      vals, ranges = reduce_parts(u)
      ret = UOp(Ops.REDUCE, u.dtype.vec(self.n), tuple(self.full(self.vec(v)) for v in vals) + ranges, u.arg)
    else: ret = self.by_lane(u)
    self.memo[u] = ret
    return ret

  def transposed(self, u: UOp) -> UOp | None:
    """A load that isn't contiguous in r but is in another UPCAST range q (a transpose: read along a row, written
    along a column) as lanes taken from vectors loaded along q: lane i is lane q of the vector at r = i, q = 0. Once
    expand gives q its values, the copies share those vector loads and gather their lanes in registers (shuffles)
    instead of loading them one by one. None where there is no such q."""
    q = next((q for q in u.src[1].toposort() if q.op is Ops.RANGE and q is not self.r and range_size(q) in TRANSPOSED
              and range_kind(q) is AxisType.UPCAST and is_contiguous(u, q)), None)
    if q is None: return None
    def lane(i: int) -> UOp:
      v = vector_load(u.substitute({self.r: UOp.const(self.r.dtype, i)}), q)
      pick = UOp(Ops.GEP, u.dtype, (v,), range_size(q) - 1)  # lane q of v, which expand's copies fold to one GEP
      for j in reversed(range(range_size(q) - 1)):
        pick = UOp(Ops.WHERE, u.dtype, (UOp(Ops.CMPNE, dtypes.bool, (q, UOp.const(q.dtype, j))), pick,
                                        UOp(Ops.GEP, u.dtype, (v,), j)))
      return pick
    self.shuffled.add(ret := UOp(Ops.VECTORIZE, u.dtype.vec(self.n), tuple(lane(i) for i in range(self.n))))
    return ret
  def mask(self, u: UOp) -> UOp | None:
    """Bool u (depending on r) as a mask vector computed as one, or None: a comparison of float32 vectors, or AND, OR
    or != of masks and bool constants (a relu's gradient, `x <= 0`, is `(x < 0) | ((x != 0) != True)`)."""
    if u.op in (Ops.CMPLT, Ops.CMPNE) and u.src[0].dtype == dtypes.float32:
      vs = [self.vec(s) for s in u.src]
      return UOp(u.op, dtypes.bool.vec(self.n), tuple(self.full(v) for v in vs)) if self.any_real(vs) else None
    if u.op not in (Ops.AND, Ops.OR, Ops.CMPNE) or u.src[0].dtype != dtypes.bool: return None
    ms: list[UOp | None] = [UOp(Ops.CONST, dtypes.bool.vec(self.n), (), s.arg) if s.op is Ops.CONST
                            else self.vec(s) if self.r in s.toposort() else None for s in u.src]
    if any(m is None or m.op is Ops.VECTORIZE for m in ms): return None  # a bool copied lane by lane is no mask
    return UOp(u.op, dtypes.bool.vec(self.n), tuple(m for m in ms if m is not None))
  def where(self, u: UOp) -> UOp | None:
    """A float32 WHERE whose condition is a mask (or doesn't depend on r) as one vector select, or None."""
    cond = self.vec(u.src[0])
    if cond.dtype.count != 1 and cond.op is Ops.VECTORIZE: return None
    vs = [self.vec(s) for s in u.src[1:]]
    if not self.any_real([cond, *vs]): return None
    return UOp(Ops.WHERE, u.dtype.vec(self.n), (cond, *(self.full(v) for v in vs)))

  def any_real(self, vs: list[UOp]) -> bool:
    """True if some value is a vector computed as one (not lanes gathered one by one, nor a broadcast): only then is
    an op on vectors worth it."""
    return any(v.dtype.count == self.n and (v.op is not Ops.VECTORIZE or v in self.shuffled) for v in vs)
  def full(self, v: UOp) -> UOp: return v if v.dtype.count == self.n else broadcast(v, self.n)
  def by_lane(self, u: UOp) -> UOp:
    """Lane i of u on its own. An elementwise op on floats takes lane i of its vectorized sources (GEP), so what
    feeds it stays vectors; anything else is copied with the range set to i."""
    srcs = [self.vec(s) if s.dtype in VECTOR_DTYPES else None for s in u.src]
    if not (u.op in GroupOp.Elementwise and u.dtype in VECTOR_DTYPES and self.any_real([v for v in srcs if v])):
      return UOp(Ops.VECTORIZE, u.dtype.vec(self.n), tuple(_lanes(u, self.r)))
    def lane_src(s: UOp, v: UOp | None, i: int) -> UOp:
      if v is None: return s.substitute({self.r: UOp.const(self.r.dtype, i)})
      return UOp(Ops.GEP, v.dtype.scalar(), (v,), i) if v.dtype.count > 1 else v
    return UOp(Ops.VECTORIZE, u.dtype.vec(self.n),
               tuple(u.replace(src=tuple(lane_src(s, v, i) for s, v in zip(u.src, srcs))) for i in range(self.n)))

  def store(self, st: UOp) -> list[UOp]:
    """One vector STORE where the address has stride 1 in r (and any gate does not depend on it), else one per lane."""
    val = self.vec(st.src[2])
    if val.dtype.count == self.n and is_contiguous(st, self.r):
      base = simplify(st.src[1].substitute({self.r: UOp.const(self.r.dtype, 0)}))
      return [st.replace(src=(st.src[0], base, val) + st.src[3:])]
    if val.dtype.count != self.n: return _lanes(st, self.r)
    return [UOp(Ops.STORE, st.dtype, (s.src[0], s.src[1], UOp(Ops.GEP, val.dtype.scalar(), (val,), i)) + s.src[3:])
            for i, s in enumerate(_lanes(st, self.r))]

def loads_contiguous(value: UOp, r: UOp) -> bool:
  """True if some load of value's reduces moves along r and every one that does is contiguous in it (stride 1, no
  gate on r). Loads outside the reduces run once per output: they may go lane by lane."""
  inner = {u for red in value.toposort() if red.op is Ops.REDUCE for u in red.toposort()}
  moving = [u for u in inner if u.op is Ops.LOAD and r in u.toposort()]
  return bool(moving) and all(is_contiguous(u, r) for u in moving)

def vector_range(st: UOp) -> UOp | None:
  """The UPCAST range (of 2, 4, 8 or 16) a STORE's value becomes a vector along: one its address has stride 1 in, or
  one its loads are all contiguous in (a convolution's output channels with channel-last weights; the store then
  writes lane by lane). The longest such range, a contiguous store first among equals."""
  if st.src[2].dtype not in VECTOR_DTYPES: return None
  ranges = [r for r in st.toposort() if r.op is Ops.RANGE and range_kind(r) is AxisType.UPCAST
            and range_size(r) in (2, 4, 8, 16)]
  stored = {r: index_stride(st.src[1], r) == 1 for r in ranges}
  ok = [r for r in ranges if stored[r] or loads_contiguous(st.src[2], r)]
  return max(ok, key=lambda r: (range_size(r), stored[r]), default=None)

def _lanes_range(red: UOp) -> UOp | None:
  """The LANES range of a REDUCE, if its size makes a vector and the reduced value is a float."""
  return next((r for r in red.src if r.op is Ops.RANGE and range_kind(r) is AxisType.LANES
               and range_size(r) in (2, 4, 8, 16) and red.dtype in VECTOR_DTYPES), None)

def _vector_accumulator(red: UOp) -> UOp | None:
  """A REDUCE over a LANES range keeps one vector accumulator (lane i sums the iterations where the range is i) and
  adds its lanes up after the loops: a sum along a contiguous axis loads and adds whole vectors."""
  if (r := _lanes_range(red)) is None or red.arg not in GroupOp.Vector: return None
  v = _Vectorizer(r)
  vals, all_ranges = reduce_parts(red)
  ranges = tuple(s for s in all_ranges if s is not r)
  vec_vals = [v.full(v.vec(x)) for x in vals]
  acc = UOp(Ops.REDUCE, red.dtype.vec(v.n), tuple(vec_vals) + ranges, red.arg) if ranges else \
    tree_reduce(red.arg, vec_vals)
  return tree_reduce(red.arg, [UOp(Ops.GEP, red.dtype, (acc,), i) for i in range(v.n)])

def _vector_store(st: UOp) -> list[UOp]:
  return [st] if st.op is not Ops.STORE or (r := vector_range(st)) is None else _Vectorizer(r).store(st)

# bottom-up and once: the reduces are vectors before a store's value is
pm_vectorize = PatternMatcher([
  # reduce over a LANES range -> the lanes of a vector accumulator, added
  (UPat(Ops.REDUCE, name="red"), _vector_accumulator),
  # sink(store, ...) -> sink(store of a vector value, or one store per lane of it, ...)
  (UPat(Ops.SINK, name="sink"), lambda sink: sink.replace(src=tuple(v for st in sink.src for v in _vector_store(st))))])

def vectorize_upcasts(sink: UOp) -> UOp:
  """Each STORE whose address is contiguous in an UPCAST range computes and writes that range as one vector. Kernels
  with a GROUP reduce (shared memory holds scalars) stay as they are."""
  if any(u.op is Ops.RANGE and range_kind(u) is AxisType.GROUP for u in sink.toposort()): return sink
  return graph_rewrite(sink, pm_vectorize, once=True)

# *** devectorize: bottom-up, so a vector op's sources are already VECTORIZEs of their lanes ***
def _lane(s: UOp, i: int) -> UOp:
  return s if s.dtype.count == 1 else s.src[i] if s.op is Ops.VECTORIZE else UOp(Ops.GEP, s.dtype.scalar(), (s,), i)

def _per_lane(u: UOp) -> UOp | None:
  """A vector op (but VECTORIZE) as a VECTORIZE of one scalar op per lane, on lane i of each vector source; a vector
  load reads consecutive addresses."""
  if u.dtype.count == 1: return None
  def src(i: int) -> tuple[UOp, ...]:
    if u.op is not Ops.LOAD: return tuple(_lane(s, i) for s in u.src)
    return (u.src[0], u.src[1] + i if i else u.src[1]) + u.src[2:]
  return UOp(Ops.VECTORIZE, u.dtype, tuple(UOp(u.op, u.dtype.scalar(), src(i), u.arg) for i in range(u.dtype.count)))

def _store_lanes(st: UOp) -> tuple[UOp, ...]:
  if st.op is not Ops.STORE or st.src[2].op is not Ops.VECTORIZE: return (st,)
  return tuple(st.replace(src=(st.src[0], st.src[1] + i if i else st.src[1], v) + st.src[3:])
               for i, v in enumerate(st.src[2].src))

pm_devectorize = PatternMatcher([
  # lane i of VECTORIZE(x0, x1, ...) -> xi
  (UPat(Ops.GEP, src=(UPat(Ops.VECTORIZE, name="v"),), name="g"), lambda g, v: v.src[g.arg]),
  # op on vectors -> VECTORIZE(op on lane 0, op on lane 1, ...)
  (UPat(tuple(set(Ops) - {Ops.VECTORIZE, Ops.GEP}), name="u"), _per_lane),
  # sink(store(buf, idx, VECTORIZE(x0, x1, ...))) -> sink(store(buf, idx, x0), store(buf, idx + 1, x1), ...)
  (UPat(Ops.SINK, name="sink"), lambda sink: sink.replace(src=tuple(t for st in sink.src for t in _store_lanes(st))))])

def renderer_holds(ren: Renderer, dt: DType) -> bool:
  """True when the renderer can write vectors of dt's length and scalar type (bool vectors: masks of float32 lanes)."""
  return dt.count in ren.vector_widths and (dt.scalar() in VECTOR_DTYPES + BYTES or dt.scalar() == dtypes.bool)

def devectorize(sink: UOp, ren: Renderer) -> UOp:
  """The AST with every vector split into scalars, unless the renderer holds all of the kernel's vector types."""
  vectors = {u.dtype for u in sink.toposort() if u.dtype.count > 1}
  if all(renderer_holds(ren, dt) for dt in vectors): return sink
  return simplify(graph_rewrite(sink, pm_devectorize, once=True))
