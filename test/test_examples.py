"""The examples run as scripts (small settings): examples/beautiful_mnist.py is the README's main job."""
import os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

@pytest.mark.parametrize("opt", ["ADAM", "SGD", "MUON"])
def test_beautiful_mnist_runs(opt, tmp_path):
  """A few steps with each optimizer: @function on the model, TinyJit on the step and the test accuracy; SAVE writes
  the trained weights (examples/webgpu/export_mnist.py reads them)."""
  env = {**os.environ, "PYTHONPATH": ROOT, "STEPS": "3", "BS": "32", opt: "1", "SAVE": str(tmp_path / "w.safetensors")}
  out = subprocess.run([sys.executable, "examples/beautiful_mnist.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=1200)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "test accuracy" in out.stderr + out.stdout
  from fusegrad import nn
  from examples.beautiful_mnist import Model
  model = Model()
  loaded = nn.state.load_state_dict(model, nn.state.safe_load(tmp_path / "w.safetensors"), strict=True)
  assert len(loaded) == len(nn.state.get_state_dict(model)) == 20
