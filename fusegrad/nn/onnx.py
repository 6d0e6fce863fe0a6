"""Run ONNX models with fusegrad's lazy Tensor (docs/onnx.md). The ops are in nn/onnx_ops*.py, one small function
each in the OPS registry."""
from __future__ import annotations
import functools, inspect, os, time
from collections import ChainMap
from typing import Any, Callable, Mapping
from fusegrad.tensor import Tensor
from fusegrad.device import Device
from fusegrad.helpers import Context
from fusegrad.nn.onnx_ops import OPS, Seq, onnx_dtype
import fusegrad.nn.onnx_ops_nn, fusegrad.nn.onnx_ops_extra  # noqa: F401  (they register more ops)

def tensor_from_proto(t: Any, base_dir: str | None = None) -> Tensor:
  """A TensorProto (raw, typed fields or external data next to base_dir) as a Tensor."""
  from onnx import numpy_helper
  onnx_dtype(t.data_type)  # a clear error for the types fusegrad lacks
  return Tensor(numpy_helper.to_array(t, base_dir or "").copy())

class OnnxError(NotImplementedError):
  """An op, op version or attribute this runner doesn't handle."""

class OnnxRunner:
  """Loads an ONNX model (a path, bytes or an onnx.ModelProto; external data next to the file or in base_dir) onto
  device and runs it: `runner({name: array or Tensor})` returns {output name: Tensor} (docs/onnx.md)."""
  def __init__(self, model: Any, device: str | None = None, base_dir: str | None = None):
    import onnx
    if isinstance(model, (str, os.PathLike)):
      base_dir = base_dir or os.path.dirname(os.path.abspath(model))
      model = onnx.load(os.fspath(model), load_external_data=False)
    elif isinstance(model, bytes): model = onnx.load_from_string(model)
    if not isinstance(model, onnx.ModelProto): raise TypeError(f"OnnxRunner: want a path or ModelProto, not {model!r}")
    self.model, self.base_dir, self.device = model, base_dir, Device.canonicalize(device)
    self.opset = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    self.functions = {(f.domain, f.name): f for f in model.functions}
    with Context(DEV=self.device):  # the device of what ops make from nothing (Range...)
      self.initializers = {t.name: tensor_from_proto(t, base_dir) for t in model.graph.initializer}
    self.inputs = {i.name: i for i in model.graph.input if i.name not in self.initializers}
    self.output_names = [o.name for o in model.graph.output]

  def __call__(self, inputs: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    feeds = {**(inputs or {}), **kw}
    missing = [n for n, i in self.inputs.items() if n not in feeds and not i.type.HasField("optional_type")]
    if missing: raise ValueError(f"OnnxRunner: missing inputs {missing}; the model takes {list(self.inputs)}")
    unknown = [n for n in feeds if n not in self.inputs and n not in self.initializers]
    if unknown: raise ValueError(f"OnnxRunner: unknown inputs {unknown}; the model takes {list(self.inputs)}")
    with Context(DEV=self.device):
      env: dict[str, Any] = {**self.initializers, **{n: self._feed(n, v) for n, v in feeds.items()}}
      return dict(zip(self.output_names, self.run_graph(self.model.graph, env)))

  def _feed(self, name: str, v: Any) -> Any:
    if v is None or isinstance(v, (Tensor, Seq)): return v
    return Seq(self._feed(name, x) for x in v) if isinstance(v, list) else Tensor(v, device=self.device)

  def run_graph(self, graph: Any, env: Mapping[str, Any]) -> list[Any]:
    """Runs the nodes of graph (or a subgraph: env then holds the outer scope) and returns its outputs in order."""
    scope: ChainMap[str, Any] = ChainMap({}, dict(env))
    for t in graph.initializer: scope[t.name] = tensor_from_proto(t, self.base_dir)
    for node in graph.node: self.run_node(node, scope)
    return [scope[o.name] for o in graph.output]

  def run_node(self, node: Any, scope: ChainMap[str, Any]) -> None:
    """One node: look up its inputs, call the op, store the outputs by name."""
    domain = node.domain or "ai.onnx"
    opset = self.opset.get(domain, self.opset.get("ai.onnx", 0))
    if (node.domain, node.op_type) in self.functions: outs = self._run_function(node, scope)
    else:
      fn = OPS.get(node.op_type) if domain in _DOMAINS else None
      if fn is None: raise OnnxError(f"ONNX op {domain}.{node.op_type} (node {node.name!r}, opset {opset}) is not "
                                     "supported by fusegrad")
      args = [scope[n] if n else None for n in node.input]
      kw = {a.name: self._attribute(a) for a in node.attribute}
      params = _params(fn)
      if "opset" in params: kw["opset"] = opset
      if "n_outputs" in params: kw["n_outputs"] = len(node.output)
      if "run_graph" in params: kw["run_graph"] = lambda g, e: self.run_graph(g, ChainMap(e, scope))
      if DEBUG_NODES: t0 = time.perf_counter()
      try: outs = fn(*args, **kw)
      except TypeError as e:
        if "argument" not in str(e): raise
        raise OnnxError(f"ONNX op {node.op_type} (node {node.name!r}, opset {opset}): {e}") from e
      if DEBUG_NODES: print(f"{node.op_type:20s} {node.name:30s} {(time.perf_counter() - t0) * 1e3:8.2f} ms")
    for name, value in zip(node.output, outs if isinstance(outs, tuple) else [outs]):
      if name: scope[name] = value

  def _run_function(self, node: Any, scope: ChainMap[str, Any]) -> tuple:
    """A model-local function: its body run on the node's inputs (attributes of the call are not forwarded)."""
    f = self.functions[(node.domain, node.op_type)]
    inner: ChainMap[str, Any] = ChainMap({n: scope[a] if a else None for n, a in zip(f.input, node.input)})
    for n in f.node: self.run_node(n, inner)
    return tuple(inner[o] for o in f.output)

  def _attribute(self, a: Any) -> Any:
    from onnx import helper, AttributeProto
    if a.type == AttributeProto.TENSOR: return tensor_from_proto(a.t, self.base_dir)
    if a.type == AttributeProto.GRAPH: return a.g
    if a.type == AttributeProto.TENSORS: return [tensor_from_proto(t, self.base_dir) for t in a.tensors]
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes): return v.decode()
    return [s.decode() for s in v] if isinstance(v, list) and v and isinstance(v[0], bytes) else v

_DOMAINS = ("ai.onnx", "ai.onnx.preview", "ai.onnx.preview.training", "ai.onnx.ml")  # all served by OPS
DEBUG_NODES = False  # set to True to print each node's build time

@functools.cache
def _params(fn: Callable) -> set[str]: return set(inspect.signature(fn).parameters)

def run_onnx(path: str, inputs: Mapping[str, Any]) -> dict[str, Any]:
  """One-shot: load path and run it on inputs, returning NumPy arrays by output name."""
  return {k: v.numpy() if isinstance(v, Tensor) else v for k, v in OnnxRunner(path)(inputs).items()}
