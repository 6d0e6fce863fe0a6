"""Bad inputs, table-driven: for each (op, bad arguments) pair fusegrad raises the exception class torch raises for the
same input (torch runs in the test, so the expected class is torch's own), with a message that names the op and the
shapes or values involved.

Each case is written once, against a small namespace `L` that is torch (with torch.nn.functional) or fusegrad, so both
libraries see the same call. `needles` are the strings fusegrad's message must contain.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fusegrad import Tensor, dtypes

def _np(shape_or_vals: Any, dtype: str) -> np.ndarray:
  if isinstance(shape_or_vals, tuple):
    return np.arange(int(np.prod(shape_or_vals)), dtype=np.float32).reshape(shape_or_vals).astype(dtype)
  return np.array(shape_or_vals, dtype=dtype)

def _torch_ns() -> SimpleNamespace:
  def t(s: Any, dtype: str = "float32") -> torch.Tensor:
    return torch.tensor(_np(s, dtype).astype("int64") if dtype == "int32" else _np(s, dtype))  # torch indices: int64
  return SimpleNamespace(
    t=t, stack=lambda *ts, dim=0: torch.stack(ts, dim), cat=lambda *ts, dim=0: torch.cat(ts, dim), einsum=torch.einsum,
    pad=lambda x, p, mode="constant": F.pad(x, p, mode=mode), one_hot=F.one_hot,
    conv2d=lambda x, w, b=None, **kw: F.conv2d(x, w, b, **kw),
    conv1d=lambda x, w, b=None, **kw: F.conv1d(x, w, b, **kw),
    max_pool2d=F.max_pool2d, avg_pool2d=F.avg_pool2d, meshgrid=torch.meshgrid, linspace=torch.linspace,
    arange=torch.arange, zeros=torch.zeros, ones=torch.ones, full=torch.full, eye=torch.eye, randperm=torch.randperm,
    randint=lambda lo, hi, shape: torch.randint(lo, hi, shape), where=torch.where,
    dtype=lambda name: getattr(torch, name, name), tensor=lambda v, dtype=None: torch.tensor(v, dtype=dtype),
    cross_entropy=lambda x, y: F.cross_entropy(x, y), bce=lambda x, y: F.binary_cross_entropy(x, y),
    bcel=F.binary_cross_entropy_with_logits,
    interpolate=lambda x, size, mode="nearest": F.interpolate(x, size=size, mode=mode))

def _tiny_ns() -> SimpleNamespace:
  def t(s: Any, dtype: str = "float32") -> Tensor: return Tensor(_np(s, dtype))
  return SimpleNamespace(
    t=t, stack=lambda *ts, dim=0: Tensor.stack(*ts, dim=dim), cat=lambda *ts, dim=0: ts[0].cat(*ts[1:], dim=dim),
    einsum=Tensor.einsum, pad=lambda x, p, mode="constant": x.pad(p, mode=mode), one_hot=lambda x, n=-1: x.one_hot(n),
    conv2d=lambda x, w, b=None, **kw: x.conv2d(w, b, **kw), conv1d=lambda x, w, b=None, **kw: x.conv1d(w, b, **kw),
    max_pool2d=lambda x, **kw: x.max_pool2d(**kw), avg_pool2d=lambda x, **kw: x.avg_pool2d(**kw),
    meshgrid=lambda *ts, indexing="ij": ts[0].meshgrid(*ts[1:], indexing=indexing), linspace=Tensor.linspace,
    arange=Tensor.arange, zeros=Tensor.zeros, ones=Tensor.ones, full=Tensor.full, eye=Tensor.eye,
    randperm=Tensor.randperm,
    randint=lambda lo, hi, shape: Tensor.randint(*shape, low=lo, high=hi), where=lambda c, x, y: c.where(x, y),
    dtype=lambda name: getattr(dtypes, name, name), tensor=lambda v, dtype=None: Tensor(v, dtype=dtype),
    cross_entropy=lambda x, y: x.cross_entropy(y), bce=lambda x, y: x.binary_crossentropy(y),
    bcel=lambda x, y: x.binary_crossentropy_logits(y),
    interpolate=lambda x, size, mode="nearest": x.interpolate(size, mode=mode))

@dataclass(frozen=True)
class Case:
  name: str                      # "op: what is wrong"
  fn: Callable[[Any], Any]       # L -> the bad call
  needles: tuple[str, ...]       # what fusegrad's message must name besides the op
  op: str = ""                   # the op name the message must contain (default: name up to the colon)

C = Case
x23 = lambda L: L.t((2, 3))  # noqa: E731
idx = lambda L, v: L.t(v, "int32")  # noqa: E731

CASES: list[Case] = [
  # reshape / view / flatten / unflatten
  C("reshape: two -1", lambda L: x23(L).reshape(-1, -1), ("(2, 3)", "-1")),
  C("reshape: wrong numel", lambda L: x23(L).reshape(4, 2), ("(2, 3)", "(4, 2)")),
  C("reshape: -2", lambda L: x23(L).reshape(-2, 3), ("(2, 3)", "-2")),
  C("reshape: -1 does not divide", lambda L: x23(L).reshape(4, -1), ("(2, 3)", "(4, -1)")),
  C("reshape: -1 of zero elements", lambda L: L.t((0, 3)).reshape(-1, 0), ("(0, 3)", "(-1, 0)")),
  C("view: wrong numel", lambda L: x23(L).view(7), ("(2, 3)", "7"), op="reshape"),
  C("flatten: start after end", lambda L: L.t((2, 3, 4)).flatten(2, 1), ("2", "1")),
  C("flatten: dim out of range", lambda L: x23(L).flatten(0, 3), ("3",)),
  C("unflatten: sizes do not multiply", lambda L: L.t((6,)).unflatten(0, (4, 2)), ("(4, 2)", "6")),
  C("unflatten: dim out of range", lambda L: L.t((6,)).unflatten(1, (3, 2)), ("1",)),
  # permute / transpose
  C("permute: repeated dim", lambda L: x23(L).permute(0, 0), ("(0, 0)",)),
  C("permute: too few dims", lambda L: x23(L).permute(0), ("(0,)", "(2, 3)")),
  C("permute: too many dims", lambda L: x23(L).permute(0, 1, 2), ("(0, 1, 2)", "(2, 3)")),
  C("permute: dim out of range", lambda L: x23(L).permute(0, 2), ("2",)),
  C("permute: negative dim out of range", lambda L: x23(L).permute(-3, 0), ("-3",)),
  C("transpose: dim out of range", lambda L: x23(L).transpose(0, 2), ("2",)),
  C("transpose: a dim that is a tuple", lambda L: x23(L).transpose((0, 1), 1), ("transpose", "tuple")),
  C("transpose: negative dim out of range", lambda L: x23(L).transpose(-3, 1), ("-3",)),
  # flip / roll / squeeze / unsqueeze / expand / repeat
  C("flip: dim out of range", lambda L: x23(L).flip(2), ("2",)),
  C("flip: negative dim out of range", lambda L: x23(L).flip(-3), ("-3",)),
  C("flip: repeated dim", lambda L: x23(L).flip((0, 0)), ("0",)),
  C("roll: dim out of range", lambda L: x23(L).roll(1, 2), ("2",)),
  C("roll: shifts and dims differ in length", lambda L: x23(L).roll((1, 2), (0,)), ("(1, 2)", "(0,)")),
  C("squeeze: dim out of range", lambda L: x23(L).squeeze(2), ("2",)),
  C("squeeze: negative dim out of range", lambda L: x23(L).squeeze(-3), ("-3",)),
  C("squeeze: 0-d tensor, dim out of range", lambda L: L.t(1.0).squeeze(1), ("1",)),
  C("unsqueeze: dim out of range", lambda L: x23(L).unsqueeze(3), ("3",)),
  C("unsqueeze: negative dim out of range", lambda L: x23(L).unsqueeze(-4), ("-4",)),
  C("expand: non-1 dim", lambda L: x23(L).expand(4, 3), ("(2, 3)", "(4, 3)")),
  C("expand: fewer dims", lambda L: x23(L).expand(3), ("(2, 3)", "(3,)")),
  C("expand: negative size", lambda L: L.t((1, 3)).expand(-2, 3), ("-2",)),
  C("repeat: fewer repeats than dims", lambda L: x23(L).repeat(2), ("(2,)", "(2, 3)")),
  C("repeat: negative repeat", lambda L: x23(L).repeat(-1, 1), ("-1",)),
  # stack / cat / split / chunk
  C("stack: mismatched shapes", lambda L: L.stack(x23(L), L.t((3, 2))), ("(2, 3)", "(3, 2)")),
  C("stack: dim out of range", lambda L: L.stack(x23(L), x23(L), dim=3), ("3",)),
  C("stack: negative dim out of range", lambda L: L.stack(x23(L), x23(L), dim=-4), ("-4",)),
  C("cat: mismatched sizes", lambda L: L.cat(x23(L), L.t((2, 4))), ("(2, 3)", "(2, 4)")),
  C("cat: dim out of range", lambda L: L.cat(x23(L), x23(L), dim=2), ("2",)),
  C("cat: mismatched ranks", lambda L: L.cat(x23(L), L.t((2, 3, 1))), ("(2, 3)", "(2, 3, 1)")),
  C("split: sizes do not add up", lambda L: L.t((4,)).split([1, 2]), ("[1, 2]", "4")),
  C("split: dim out of range", lambda L: L.t((4,)).split(2, 1), ("1",)),
  C("chunk: zero chunks", lambda L: L.t((4,)).chunk(0), ("0",)),
  C("chunk: dim out of range", lambda L: L.t((4,)).chunk(2, 1), ("1",)),
  # pad
  C("pad: unknown mode", lambda L: L.pad(x23(L), (1, 1), mode="bogus"), ("bogus",)),
  C("pad: odd padding length", lambda L: L.pad(x23(L), (1, 1, 1)), ("(1, 1, 1)",)),
  C("pad: padding longer than the dims", lambda L: L.pad(x23(L), (1, 1, 1, 1, 1, 1)), ("(1, 1, 1, 1, 1, 1)", "(2, 3)")),
  C("pad: reflect pad as large as the dim", lambda L: L.pad(L.t((1, 2, 3)), (3, 3), mode="reflect"), ("3",)),
  C("pad: circular pad larger than the dim", lambda L: L.pad(L.t((1, 2, 3)), (4, 0), mode="circular"), ("4",)),
  # gather / scatter
  C("gather: mismatched ranks", lambda L: x23(L).gather(0, idx(L, [0, 1])), ("(2,)", "(2, 3)")),
  C("gather: dim out of range", lambda L: x23(L).gather(2, idx(L, [[0, 1, 0]])), ("2",)),
  C("gather: index larger than input", lambda L: x23(L).gather(1, idx(L, [[0]] * 3)), ("(3, 1)", "(2, 3)")),
  C("gather: float index", lambda L: x23(L).gather(0, L.t([[0.0, 1.0, 0.0]])), ("float",)),
  C("scatter: mismatched ranks", lambda L: x23(L).scatter(0, idx(L, [0, 1]), x23(L)), ("(2,)", "(2, 3)")),
  C("scatter: dim out of range", lambda L: x23(L).scatter(2, idx(L, [[0, 1, 0]]), x23(L)), ("2",)),
  C("scatter: index larger than self", lambda L: x23(L).scatter(1, idx(L, [[0]] * 3), L.t((3, 1))),
    ("(3, 1)", "(2, 3)")),
  C("scatter: index larger than src", lambda L: x23(L).scatter(0, idx(L, [[0, 1, 0]] * 3), x23(L)),
    ("(3, 3)", "(2, 3)")),
  C("scatter: src of another dtype", lambda L: x23(L).half().scatter(0, idx(L, [[0, 1, 0]]), x23(L)),
    ("float", "half")),
  C("scatter_reduce: unknown reduce", lambda L: x23(L).scatter_reduce(0, idx(L, [[0, 1, 0]]), x23(L), "bogus"),
    ("bogus",)),
  # unfold / diagonal / tril
  C("unfold: size larger than the dim", lambda L: L.t((8,)).unfold(0, 9, 3), ("9", "8")),
  C("unfold: dim out of range", lambda L: L.t((8,)).unfold(1, 8, 3), ("1",)),
  C("unfold: negative step", lambda L: L.t((8,)).unfold(0, 1, -1), ("-1",)),
  C("unfold: zero step", lambda L: L.t((8,)).unfold(0, 1, 0), ("0",)),
  C("unfold: negative size", lambda L: L.t((8,)).unfold(0, -1, 1), ("-1",)),
  C("diagonal: equal dims", lambda L: L.t((3, 3)).diagonal(0, 0, 0), ("0",)),
  C("diagonal: dim out of range", lambda L: L.t((3, 3)).diagonal(0, 0, 2), ("2",)),
  C("diagonal: one-dimensional input", lambda L: L.t((3,)).diagonal(), ("1",)),
  C("tril: one-dimensional input", lambda L: L.t((3,)).tril(), ("(3,)",)),
  C("triu: one-dimensional input", lambda L: L.t((3,)).triu(), ("(3,)",)),
  # einsum
  C("einsum: mismatched sizes", lambda L: L.einsum("ij,jk->ik", x23(L), L.t((4, 5))), ("j", "3", "4")),
  C("einsum: output letter not in inputs", lambda L: L.einsum("ij->ik", x23(L)), ("k",)),
  C("einsum: too few operands", lambda L: L.einsum("ij,jk->ik", x23(L)), ("2", "1")),
  C("einsum: too many letters for the dims", lambda L: L.einsum("ijk->i", x23(L)), ("ijk", "(2, 3)")),
  C("einsum: too few letters for the dims", lambda L: L.einsum("i->i", x23(L)), ("i", "(2, 3)")),
  C("einsum: repeated letter of different sizes", lambda L: L.einsum("ii->i", x23(L)), ("i", "2", "3")),
  C("einsum: repeated output letter", lambda L: L.einsum("i->ii", L.t((3,))), ("ii",)),
  C("einsum: two dots", lambda L: L.einsum("..i->i", L.t((3,))), ("..i",)),
  C("einsum: two ellipses", lambda L: L.einsum("...i...->i", L.t((3,))), ("...i...",)),
  C("einsum: bad character", lambda L: L.einsum("i$->i", L.t((3, 3))), ("$",)),
  # meshgrid / linspace / arange / creation
  C("meshgrid: unknown indexing", lambda L: L.meshgrid(L.t((3,)), indexing="bad"), ("bad",)),
  C("meshgrid: two-dimensional input", lambda L: L.meshgrid(x23(L), indexing="ij"), ("(2, 3)",)),
  C("linspace: negative steps", lambda L: L.linspace(1, 2, -1), ("-1",)),
  C("linspace: bool dtype", lambda L: L.linspace(5, 10, 3, dtype=L.dtype("bool")), ("bool",)),
  C("arange: zero step", lambda L: L.arange(0, 10, 0), ("0",)),
  C("arange: infinite end", lambda L: L.arange(float("inf")), ("inf",)),
  C("arange: nan end", lambda L: L.arange(float("nan")), ("nan",)),
  C("zeros: negative size", lambda L: L.zeros(2, -3), ("-3",)),
  C("ones: negative size", lambda L: L.ones(-1), ("-1",)),
  C("full: negative size", lambda L: L.full((2, -3), 4), ("-3",)),
  C("eye: negative size", lambda L: L.eye(-3), ("-3",)),
  C("randperm: negative n", lambda L: L.randperm(-1), ("-1",)),
  C("randint: low not below high", lambda L: L.randint(5, 2, (3,)), ("5", "2")),
  # conv / pool
  C("conv2d: channel mismatch", lambda L: L.conv2d(L.t((1, 3, 5, 5)), L.t((4, 2, 3, 3))),
    ("(1, 3, 5, 5)", "(4, 2, 3, 3)")),
  C("conv2d: kernel larger than the input", lambda L: L.conv2d(L.t((1, 3, 2, 2)), L.t((4, 3, 3, 3))),
    ("(1, 3, 2, 2)", "3")),
  C("conv2d: groups do not divide channels", lambda L: L.conv2d(L.t((1, 4, 5, 5)), L.t((4, 2, 3, 3)), groups=3),
    ("3",)),
  C("conv2d: zero stride", lambda L: L.conv2d(L.t((1, 3, 5, 5)), L.t((4, 3, 3, 3)), stride=0), ("0",)),
  C("conv2d: zero dilation", lambda L: L.conv2d(L.t((1, 3, 5, 5)), L.t((4, 3, 3, 3)), dilation=0), ("0",)),
  C("conv2d: two-dimensional input", lambda L: L.conv2d(L.t((5, 5)), L.t((4, 3, 3, 3))), ("(5, 5)",)),
  C("conv2d: bias of the wrong size", lambda L: L.conv2d(L.t((1, 3, 5, 5)), L.t((4, 3, 3, 3)), L.t((3,))),
    ("(3,)", "4")),
  C("conv1d: channel mismatch", lambda L: L.conv1d(L.t((1, 3, 5)), L.t((4, 2, 3))),
    ("(1, 3, 5)", "(4, 2, 3)"), op="conv"),
  C("max_pool2d: kernel larger than the input", lambda L: L.max_pool2d(L.t((1, 1, 4, 4)), kernel_size=5), ("5", "4")),
  C("max_pool2d: zero stride", lambda L: L.max_pool2d(L.t((1, 1, 4, 4)), kernel_size=2, stride=0), ("0",)),
  C("max_pool2d: padding over half the kernel", lambda L: L.max_pool2d(L.t((1, 1, 4, 4)), kernel_size=2, padding=2),
    ("2",)),
  C("max_pool2d: zero kernel", lambda L: L.max_pool2d(L.t((1, 1, 4, 4)), kernel_size=0), ("0",)),
  C("avg_pool2d: kernel larger than the input", lambda L: L.avg_pool2d(L.t((1, 1, 4, 4)), kernel_size=5), ("5", "4")),
  C("avg_pool2d: padding over half the kernel", lambda L: L.avg_pool2d(L.t((1, 1, 4, 4)), kernel_size=2, padding=2),
    ("2",)),
  C("avg_pool2d: zero stride", lambda L: L.avg_pool2d(L.t((1, 1, 4, 4)), kernel_size=2, stride=0), ("0",)),
  # one_hot
  C("one_hot: class past num_classes", lambda L: L.one_hot(idx(L, [0, 5]), 3), ("5", "3")),
  C("one_hot: negative class", lambda L: L.one_hot(idx(L, [0, -1]), 3), ("-1",)),
  C("one_hot: float input", lambda L: L.one_hot(L.t([0.0, 1.0]), 3), ("float",)),
  # reductions (max/min over a zero-size axis give -inf/inf as tinygrad: test_ops_reduce)
  C("argmax: zero-size tensor", lambda L: L.t((0, 3)).argmax(), ("(0, 3)",)),
  C("argmin: zero-size axis", lambda L: L.t((0, 3)).argmin(0), ("(0, 3)",)),
  C("sum: dim out of range", lambda L: x23(L).sum(2), ("2",)),
  C("sum: repeated dim", lambda L: x23(L).sum((0, 0)), ("0",)),
  C("mean: negative dim out of range", lambda L: x23(L).mean(-3), ("-3",)),
  C("max: dim out of range", lambda L: x23(L).max(5), ("5",)),
  C("prod: dim out of range", lambda L: x23(L).prod(2), ("2",)),
  C("cumsum: dim out of range", lambda L: x23(L).cumsum(2), ("2",)),
  C("softmax: dim out of range", lambda L: x23(L).softmax(2), ("2",)),
  C("logsumexp: dim out of range", lambda L: x23(L).logsumexp(3), ("3",)),
  C("std: dim out of range", lambda L: x23(L).std(2), ("2",)),
  C("topk: k larger than the dim", lambda L: L.t((4,)).topk(5), ("5", "4")),
  C("topk: dim out of range", lambda L: L.t((4,)).topk(2, 1), ("1",)),
  C("sort: dim out of range", lambda L: L.t((4,)).sort(1), ("1",)),
  # scalars out of tensors
  C("bool: several elements", lambda L: bool(x23(L)), ("6",)),
  C("bool: no elements", lambda L: bool(L.t((0,))), ("0",)),
  C("item: several elements", lambda L: x23(L).item(), ("6",)),
  # dtypes
  C("dtype: unknown string in zeros", lambda L: L.zeros(2, dtype="floaty"), ("floaty",)),
  C("dtype: empty string in sum", lambda L: x23(L).sum(dtype=""), ("''",), op="dtype"),
  C("dtype: unknown string in tensor", lambda L: L.tensor([1.0], dtype="int33"), ("int33",)),
  C("bitwise_and: floats", lambda L: x23(L).bitwise_and(x23(L)), ("float",)),
  C("sub: bools", lambda L: L.t([True], "bool") - L.t([True], "bool"), ("bool",)),
  C("pow: int to a negative int power", lambda L: idx(L, [2, 3]).pow(-1), ("-1",)),
  C("div: unknown rounding mode", lambda L: x23(L).div(2, rounding_mode="bogus"), ("bogus",)),
  # shapes that don't broadcast or multiply
  C("add: shapes that don't broadcast", lambda L: x23(L) + L.t((4,)), ("(2, 3)", "(4,)")),
  C("mul: shapes that don't broadcast", lambda L: x23(L) * L.t((3, 2)), ("(2, 3)", "(3, 2)")),
  C("where: shapes that don't broadcast", lambda L: L.where(L.t((2, 3), "bool"), x23(L), L.t((4,))),
    ("(2, 3)", "(4,)")),
  C("maximum: shapes that don't broadcast", lambda L: x23(L).maximum(L.t((4,))), ("(2, 3)", "(4,)")),
  C("matmul: inner dims differ", lambda L: x23(L) @ x23(L), ("(2, 3)",)),
  C("matmul: vectors of different lengths", lambda L: L.t((3,)) @ L.t((4,)), ("(3,)", "(4,)")),
  C("matmul: scalar operand", lambda L: L.t(1.0) @ L.t((3,)), ("()",)),
  C("masked_fill: mask that doesn't broadcast", lambda L: x23(L).masked_fill(L.t((4,), "bool"), 0), ("(2, 3)", "(4,)")),
  # indexing
  C("getitem: index past the dim", lambda L: x23(L)[2], ("2",), op="index"),
  C("getitem: negative index past the dim", lambda L: x23(L)[-3], ("-3",), op="index"),
  C("getitem: too many indices", lambda L: x23(L)[0, 0, 0], ("(2, 3)",), op="index"),
  C("getitem: index past the second dim", lambda L: x23(L)[:, 5], ("5",), op="index"),
  C("getitem: float index", lambda L: x23(L)[1.5], ("1.5",), op="index"),
  # losses
  C("cross_entropy: batch sizes differ", lambda L: L.cross_entropy(x23(L), idx(L, [0, 1, 2])), ("(2, 3)", "(3,)")),
  C("cross_entropy: float targets of another shape", lambda L: L.cross_entropy(x23(L), L.t((2, 1))),
    ("(2, 1)", "(2, 3)")),
  C("binary_crossentropy: shapes differ", lambda L: L.bce(x23(L).sigmoid(), L.t((3,))), ("(2, 3)", "(3,)")),
  # (a target that broadcasts was taken, silently: torch refuses it too)
  C("binary_crossentropy_logits: shapes differ", lambda L: L.bcel(x23(L), L.t((3,))), ("(2, 3)", "(3,)")),
  C("binary_crossentropy_logits: shapes differ, 4", lambda L: L.bcel(x23(L), L.t((4,))), ("(2, 3)", "(4,)")),
  # interpolate
  C("interpolate: unknown mode", lambda L: L.interpolate(L.t((1, 1, 4, 4)), (2, 2), mode="bogus"), ("bogus",)),
]

TORCH, TINY = _torch_ns(), _tiny_ns()

def _raised(fn: Callable[[Any], Any], L: SimpleNamespace) -> BaseException | None:
  try:
    out = fn(L)
    if isinstance(out, Tensor): out.realize()  # errors fusegrad only finds when it runs (an index past the end)
  except Exception as e: return e
  return None

def test_at_least_a_hundred_cases(): assert len(CASES) >= 100 and len({c.name for c in CASES}) == len(CASES)

@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_error_class_and_message(case: Case):
  want = _raised(case.fn, TORCH)
  assert want is not None, f"torch accepts {case.name}: the case is wrong"
  got = _raised(case.fn, TINY)
  assert got is not None, f"fusegrad accepts {case.name}; torch raises {type(want).__name__}: {want}"
  assert isinstance(got, type(want)), \
    f"{case.name}: fusegrad raises {type(got).__name__} ({got}), torch {type(want).__name__}"
  op = case.op or case.name.split(":")[0]
  msg = str(got)
  for needle in (op, *case.needles): assert needle in msg, f"{case.name}: {needle!r} not in fusegrad's message {msg!r}"

if __name__ == "__main__":  # a survey: every case's classes and fusegrad's message
  for c in CASES:
    w, g = _raised(c.fn, TORCH), _raised(c.fn, TINY)
    ok = w is not None and g is not None and isinstance(g, type(w))
    wn, gn = type(w).__name__ if w else "-", type(g).__name__ if g else "-"
    print(f"{'ok ' if ok else 'BAD'} {c.name:44s} torch={wn:18s} fusegrad={gn:14s} {str(g)[:110]!r}")

def test_tinygrad_error_classes():
  # where tinygrad's own tests expect a class torch has no case for, fusegrad's error is that class too
  with pytest.raises(AttributeError, match="unknown dtype"): Tensor([1.0, 2.0]).sum(dtype="")  # tinygrad: dtypes.<name>
  with pytest.raises(AttributeError, match="unknown dtype"): Tensor([1.0, 2.0]).prod(dtype="")
  with pytest.raises(ValueError, match="stack"): Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
  with pytest.raises(NotImplementedError, match="circular"):
    Tensor.ones(1, 1, 5, 5).pad((3, -5, 1, -5), mode="circular")
  with pytest.raises(ValueError, match="repeat"): Tensor.ones(4, 6, 3).repeat((2, 4))

@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, 1e10])
def test_an_int_tensor_refuses_a_float_fill_it_cannot_hold_as_torch(value):
  x, m = Tensor([1, 2, 3], dtype=dtypes.int32), Tensor([True, False, True])
  with pytest.raises(RuntimeError, match="overflow"): x.masked_fill(m, value)
  with pytest.raises(RuntimeError, match="overflow"): x.pad((1, 1), value=value)
  with pytest.raises(RuntimeError):
    torch.tensor([1, 2, 3], dtype=torch.int32).masked_fill(torch.tensor([True, False, True]), value)
  assert x.masked_fill(m, 2.5).tolist() == [2, 2, 2]  # a float it can hold is truncated, as torch's
