"""Network ops composed from the primitives: convolution, pooling, normalization, losses, attention."""
from __future__ import annotations

class NNMixin:
  __slots__ = ()
