"""Losses, composed from Tensor methods: negative log-likelihood, cross entropy, binary cross entropy."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any
from fusegrad.dtype import dtypes
from fusegrad.gradient import with_rule
from fusegrad.uop.ops import UOp
from fusegrad.mixin.elementwise import ArgumentError, ShapeError, DTypeError
from fusegrad.mixin.indexing import check_indices

if TYPE_CHECKING: from fusegrad.tensor import Tensor

def _reduction(x: Tensor, reduction: str, op: str, total: Tensor | None = None) -> Tensor:  # total: weights' sum
  if reduction == "none": return x
  if reduction == "sum": return x.sum()
  if reduction == "mean" and total is not None: return (ok := total.ne(0)).where(x.sum() / ok.where(total, 1), math.nan)
  if reduction == "mean": return x.mean()
  raise ArgumentError(f"{op}: reduction must be 'none', 'mean' or 'sum', not {reduction!r}")

class LossMixin:
  __slots__ = ()
  def _target(self: Tensor, y: Any) -> Tensor: return y if isinstance(y, T := type(self)) else T(y, device=self.device)
  def _class_targets(self: Tensor, Y: Tensor, axis: int, weight: Tensor | None, ignore_index: int | None,
                     op: str) -> tuple[Tensor, Tensor, Tensor]:
    """For integer targets Y (self's shape without the class axis): the one-hot mask along axis, the class weights
    laid along axis, and each target's weight (0 where Y == ignore_index)."""
    n_cls = self.shape[axis]
    if not dtypes.is_int(Y.dtype):
      raise DTypeError(f"{op}: class-index targets must be integers, got {Y.dtype} (shape {Y.shape}; probabilities "
                       f"need the input's shape {self.shape})")
    if Y.shape != self.shape[:axis] + self.shape[axis + 1:]:
      raise ShapeError(f"{op}: targets {Y.shape} don't fit input {self.shape} (classes on axis {axis})")
    if weight is not None and weight.shape != (n_cls,):
      raise ShapeError(f"{op}: weight {weight.shape} should be ({n_cls},)")
    along = (n_cls,) + (1,) * (self.ndim - axis - 1)
    hot = Y.unsqueeze(axis) == type(self).arange(n_cls, device=self.device, dtype=Y.dtype).reshape(along)
    w = (weight if weight is not None else type(self).ones(n_cls, device=self.device)).cast(self.dtype).reshape(along)
    w_y = hot.where(w, 0).sum(axis)
    if ignore_index is not None: w_y = (Y != ignore_index).where(w_y, 0)
    return hot, w, check_indices(w_y, Y, n_cls, op, negative=False, ignore=ignore_index, what="target")

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities x (classes on axis 1, or 0 for a 1-D x) at integer targets Y, as
    torch.nn.functional.nll_loss: 'mean' divides by the summed weights of the targets that count."""
    axis = 1 if self.ndim > 1 else 0
    hot, w, w_y = self._class_targets(self._target(Y), axis, weight, ignore_index, "nll_loss")
    return _reduction(-hot.where(self, 0).sum(axis) * w_y, reduction, "nll_loss", w_y.sum())

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0,
                    weight: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """Cross entropy of logits x (classes on axis 1, or 0 for a 1-D x) against class indices or class probabilities
    Y, as torch.nn.functional.cross_entropy (label smoothing mixes in the uniform distribution).
    `Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item()` is log(2)."""
    if not 0.0 <= label_smoothing <= 1.0:
      raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    axis = 1 if self.ndim > 1 else 0
    logp, n_cls = self.log_softmax(axis), self.shape[axis]
    if (Y := self._target(Y)).shape == self.shape and not dtypes.is_int(Y.dtype):  # class probabilities
      w = weight.cast(self.dtype).reshape((n_cls,) + (1,) * (self.ndim - axis - 1)) if weight is not None else 1.0
      target = Y * (1 - label_smoothing) + label_smoothing / n_cls
      return _reduction(-(logp * target * w).sum(axis), reduction, "cross_entropy")
    hot, w, w_y = logp._class_targets(Y, axis, weight, ignore_index, "cross_entropy")
    loss = -hot.where(logp, 0).sum(axis) * w_y
    if label_smoothing > 0:  # plus eps/C times the weighted log-probabilities of every class
      smooth = -(logp * w).sum(axis) * (Y != ignore_index)
      loss = (1 - label_smoothing) * loss + (label_smoothing / n_cls) * smooth
    return _reduction(loss, reduction, "cross_entropy", w_y.sum())

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits x (classes on the last axis) against integer labels Y; labels equal to ignore_index
    count neither in the loss nor in the mean."""
    x = self.reshape(-1, self.shape[-1]) if self.ndim != 2 else self
    if (Y := self._target(Y)).shape != self.shape[:-1]:
      raise ShapeError(f"sparse_categorical_crossentropy: labels {Y.shape} don't fit logits {self.shape}")
    loss = x.cross_entropy(Y.reshape(-1), reduction, label_smoothing, None, ignore_index)
    return loss.reshape(Y.shape) if reduction == "none" else loss

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """-(y log x + (1 - y) log(1 - x)) for probabilities x, the logs clamped at -100 as in torch."""
    if Y.shape != self.shape: raise ShapeError(f"binary_crossentropy: target {Y.shape} and input {self.shape} differ")
    loss = -(Y * self.log().clip(-100) + (1 - Y) * (1 - self).log().clip(-100))
    T = type(self)  # (not self in the rule, which lives with the graph)
    def rule(g: UOp, n: UOp, xu: UOp, yu: UOp) -> tuple[UOp, UOp]:  # torch's: finite where x is 0 or 1 (not 0 * inf)
      x, y, gt = T(xu), T(yu), T(g)
      return (gt * (x - y) / (x * (1 - x)).maximum(1e-12)).uop, (gt * ((1 - x).log() - x.log())).uop
    return _reduction(loss._new(with_rule(loss.uop, (self.uop, Y.uop), rule), Y), reduction, "binary_crossentropy")

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean",
                                 pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross entropy of sigmoid(x) against y, computed from the logits without overflow
    (torch.nn.functional.binary_cross_entropy_with_logits); pos_weight scales the positive term."""
    if (Y := self._target(Y)).shape != self.shape:
      raise ShapeError(f"binary_crossentropy_logits: target {Y.shape} and input {self.shape} differ")
    log_weight = 1 + (pos_weight - 1) * Y if pos_weight is not None else 1
    return _reduction((1 - Y) * self + log_weight * (-self).softplus(), reduction, "binary_crossentropy_logits")
