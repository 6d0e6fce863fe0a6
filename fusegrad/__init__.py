"""fusegrad: a small deep-learning framework with a lazy Tensor, autograd and a fusing compiler."""
from fusegrad.tensor import Tensor
from fusegrad.dtype import dtypes
from fusegrad.device import Device, OutOfMemoryError
from fusegrad.helpers import Context, GlobalCounters, getenv, fetch, DEBUG
from fusegrad.uop.ops import Variable, UOp
from fusegrad.jit import TinyJit, function
from fusegrad import nn, export

__all__ = ["Tensor", "dtypes", "Device", "Context", "GlobalCounters", "getenv", "fetch", "DEBUG", "Variable", "UOp",
           "TinyJit", "function", "nn", "export", "OutOfMemoryError"]
