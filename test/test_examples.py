"""The examples run as scripts (small settings): examples/beautiful_mnist.py is the README's main job."""
import os, subprocess, sys
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

@pytest.mark.parametrize("opt", ["ADAM", "SGD", "MUON"])
def test_beautiful_mnist_runs(opt):
  """A few steps with each optimizer: @function on the model, TinyJit on the step and the test accuracy."""
  env = {**os.environ, "PYTHONPATH": ROOT, "STEPS": "3", "BS": "32", opt: "1"}
  out = subprocess.run([sys.executable, "examples/beautiful_mnist.py"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=1200)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "test accuracy" in out.stderr + out.stdout
