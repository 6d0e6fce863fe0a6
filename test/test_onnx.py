"""OnnxRunner: its API and errors, external data, subgraphs, and models exported with torch.onnx.export from the
project's examples, compared with PyTorch."""
import io, os, sys
import numpy as np
import pytest
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
onnx = pytest.importorskip("onnx")
from onnx import helper, TensorProto, numpy_helper
from fusegrad import Tensor
from fusegrad.nn.onnx import OnnxRunner, OnnxError, run_onnx
from fusegrad.nn.onnx_ops import OPS

def make_model(nodes, inputs, outputs, initializers=(), opset=17):
  graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
  return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

def vi(name, dtype=TensorProto.FLOAT, shape=None): return helper.make_tensor_value_info(name, dtype, shape)

def test_add_by_name_and_dynamic_dims():
  w = numpy_helper.from_array(np.array([1, -2, 3], np.float32), "w")
  m = make_model([helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                 [vi("x", shape=["batch", 3])], [vi("z")], [w])
  runner = OnnxRunner(m)
  for batch in (1, 4):
    x = np.random.default_rng(batch).normal(size=(batch, 3)).astype(np.float32)
    out = runner({"x": x})
    assert list(out) == ["z"] and isinstance(out["z"], Tensor)
    np.testing.assert_allclose(out["z"].numpy(), np.maximum(x + [1, -2, 3], 0), rtol=1e-6)
  np.testing.assert_allclose(runner(x=Tensor(np.ones((2, 3), np.float32)))["z"].numpy(), [[2, 0, 4]] * 2)

def test_unsupported_op_names_op_node_and_opset():
  m = make_model([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")], [vi("x", shape=[2])], [vi("y")],
                 opset=13)
  with pytest.raises(OnnxError, match=r"NoSuchOp.*'mystery'.*opset 13"):
    OnnxRunner(m)({"x": np.zeros(2, np.float32)})

def test_unknown_attribute_is_a_clear_error():
  m = make_model([helper.make_node("Relu", ["x"], ["y"], name="r", bogus=3)], [vi("x", shape=[2])], [vi("y")])
  with pytest.raises(OnnxError, match=r"Relu.*'r'.*bogus"): OnnxRunner(m)({"x": np.zeros(2, np.float32)})

def test_missing_and_unknown_inputs():
  m = make_model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape=[2])], [vi("y")])
  with pytest.raises(ValueError, match="missing inputs"): OnnxRunner(m)({})
  with pytest.raises(ValueError, match="unknown inputs"): OnnxRunner(m)({"x": np.zeros(2, np.float32), "q": 1})

def test_attribute_defaults_and_optional_inputs():
  # Clip with no min and no max (both optional inputs absent) is the identity; Gemm's alpha, beta, transA default
  m = make_model([helper.make_node("Clip", ["x", "", ""], ["c"]), helper.make_node("Gemm", ["c", "w"], ["y"])],
                 [vi("x", shape=[2, 3])], [vi("y")], [numpy_helper.from_array(np.eye(3, 2, dtype=np.float32), "w")])
  x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
  np.testing.assert_allclose(OnnxRunner(m)({"x": x})["y"].numpy(), x @ np.eye(3, 2))

def test_opset_dependent_semantics():
  # Softmax before opset 13 flattens the axes from `axis` (default 1) on; from 13 it is per axis -1
  x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
  for opset in (11, 13):
    m = make_model([helper.make_node("Softmax", ["x"], ["y"])], [vi("x", shape=[2, 3, 4])], [vi("y")], opset=opset)
    got = OnnxRunner(m)({"x": x})["y"].numpy()
    flat = x.reshape(2, 12) if opset == 11 else x
    ref = np.exp(flat) / np.exp(flat).sum(-1, keepdims=True)
    np.testing.assert_allclose(got, ref.reshape(x.shape), rtol=1e-5)

def test_external_data(tmp_path):
  w = np.random.default_rng(1).normal(size=(64, 64)).astype(np.float32)
  m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=[1, 64])], [vi("y")],
                 [numpy_helper.from_array(w, "w")])
  path = str(tmp_path / "model.onnx")
  onnx.save_model(m, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
  assert os.path.exists(tmp_path / "weights.bin")
  x = np.ones((1, 64), np.float32)
  np.testing.assert_allclose(run_onnx(path, {"x": x})["y"], x @ w, rtol=1e-4)

def test_if_loop_scan():
  then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t")])
  else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e")])
  # Loop: acc = acc + i, three times, and the running values as a scan output
  body = helper.make_graph(
    [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT), helper.make_node("Add", ["acc", "fi"], ["acc2"]),
     helper.make_node("Identity", ["cond"], ["cond2"]), helper.make_node("Identity", ["acc2"], ["scan"])],
    "body", [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, []), vi("acc", shape=[])],
    [vi("cond2", TensorProto.BOOL, []), vi("acc2", shape=[]), vi("scan", shape=[])])
  # Scan: cumulative sum over the rows of s
  sbody = helper.make_graph(
    [helper.make_node("Add", ["st", "row"], ["st2"]), helper.make_node("Identity", ["st2"], ["o"])],
    "sbody", [vi("st", shape=[2]), vi("row", shape=[2])], [vi("st2", shape=[2]), vi("o", shape=[2])])
  m = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
                  helper.make_node("Loop", ["n", "", "a0"], ["acc", "scans"], body=body),
                  helper.make_node("Scan", ["s0", "s"], ["sf", "srows"], body=sbody, num_scan_inputs=1)],
                 [vi("c", TensorProto.BOOL, []), vi("x", shape=[3]), vi("n", TensorProto.INT64, []), vi("a0", shape=[]),
                  vi("s0", shape=[2]), vi("s", shape=[4, 2])], [vi("y"), vi("acc"), vi("scans"), vi("sf"), vi("srows")])
  x, s = np.array([1, -2, 3], np.float32), np.arange(8, dtype=np.float32).reshape(4, 2)
  feeds = {"x": x, "n": np.array(3), "a0": np.array(10, np.float32), "s0": np.zeros(2, np.float32), "s": s}
  runner = OnnxRunner(m)
  for c in (True, False):
    out = {k: v.numpy() for k, v in runner({**feeds, "c": np.array(c)}).items()}
    np.testing.assert_allclose(out["y"], x * x if c else -x)
    np.testing.assert_allclose(out["acc"], 13)
    np.testing.assert_allclose(out["scans"], [10, 11, 13])
    np.testing.assert_allclose(out["sf"], s.sum(0))
    np.testing.assert_allclose(out["srows"], s.cumsum(0))

def test_registry_is_name_to_function():
  assert callable(OPS["Conv"]) and callable(OPS["Loop"]) and len(OPS) > 150

# *** models exported from PyTorch ***
torch = pytest.importorskip("torch")

def export(model, args, **kw) -> bytes:
  f = io.BytesIO()
  import warnings
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(model.eval(), args, f, dynamo=False, **kw)  # the TorchScript exporter: no onnxscript needed
  return f.getvalue()

class MnistCNN(torch.nn.Module):
  """The model of examples/beautiful_mnist.py, in PyTorch."""
  def __init__(self):
    super().__init__()
    nn = torch.nn
    self.layers = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32),
                                nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(),
                                nn.BatchNorm2d(64), nn.MaxPool2d(2), nn.Flatten(1), nn.Linear(576, 10))
  def forward(self, x): return self.layers(x)

def test_torch_export_mnist_cnn():
  torch.manual_seed(0)
  model = MnistCNN()
  for bn in (model.layers[4], model.layers[10]):  # non-trivial running statistics
    bn.running_mean.uniform_(-0.5, 0.5); bn.running_var.uniform_(0.5, 2)
  x = torch.randn(4, 1, 28, 28)
  data = export(model, (x,), input_names=["x"], output_names=["logits"], dynamic_axes={"x": {0: "batch"}})
  runner = OnnxRunner(data)
  for batch in (4, 2):
    xb = torch.randn(batch, 1, 28, 28)
    with torch.no_grad(): ref = model(xb).numpy()
    np.testing.assert_allclose(runner({"x": xb.numpy()})["logits"].numpy(), ref, rtol=1e-4, atol=1e-4)

class TinyTransformer(torch.nn.Module):
  """A small transformer classifier: embedding, positions, two pre-norm encoder layers, mean-pool, linear head."""
  def __init__(self, vocab=50, dim=32, heads=4, layers=2, classes=5, seq=16):
    super().__init__()
    nn = torch.nn
    self.emb, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.randn(seq, dim) * 0.1)
    layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True,
                                       activation="gelu")
    self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    self.head = nn.Linear(dim, classes)
  def forward(self, tokens):
    x = self.emb(tokens) + self.pos[:tokens.shape[1]]
    return self.head(self.enc(x).mean(1))

def test_torch_export_transformer():
  torch.manual_seed(0)
  model = TinyTransformer()
  tokens = torch.randint(0, 50, (3, 16))
  data = export(model, (tokens,), input_names=["tokens"], output_names=["logits"], opset_version=17)
  with torch.no_grad(): ref = model(tokens).numpy()
  got = OnnxRunner(data)({"tokens": tokens.numpy()})["logits"].numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)

def test_ops_page_is_up_to_date():
  """docs/onnx_ops.md is generated from the registry: rerun `python docs/gen_onnx_ops.py` after adding an op."""
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs"))
  import gen_onnx_ops
  with open(gen_onnx_ops.PAGE) as f: committed = f.read()
  assert committed == gen_onnx_ops.page(), "docs/onnx_ops.md is stale: run python docs/gen_onnx_ops.py"

def test_onnx_run_example(tmp_path):
  """examples/onnx_run.py MODEL [inputs], as the issue quotes it: prints the outputs and the timing."""
  import subprocess
  w = numpy_helper.from_array(np.array([[2.0], [3.0]], np.float32), "w")
  m = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=["batch", 2])], [vi("y")], [w])
  onnx.save_model(m, str(tmp_path / "m.onnx"))
  np.save(tmp_path / "x.npy", np.array([[1.0, 1.0], [2.0, -1.0]], np.float32))
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for extra in ([], ["--jit", "--runs", "3"]):
    res = subprocess.run([sys.executable, os.path.join(root, "examples", "onnx_run.py"), str(tmp_path / "m.onnx"),
                          f"x={tmp_path / 'x.npy'}", *extra], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "output y: (2, 1) float32 first values [5.0, 1.0]" in res.stdout and "ms" in res.stdout, res.stdout
