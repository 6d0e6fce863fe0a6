"""Export the MNIST model of examples/beautiful_mnist.py for the page in this folder (index.html), which runs it with
WebGPU in the browser, no Python behind it:

  SAVE=mnist.safetensors python examples/beautiful_mnist.py     # train (98% test accuracy) and save the weights
  python examples/webgpu/export_mnist.py mnist.safetensors      # -> examples/webgpu/model/
  python -m http.server -d examples/webgpu                      # then open http://localhost:8000 in Chrome

Without a weights file it trains first (beautiful_mnist's main, STEPS steps). model/ gets the kernels (WGSL), model.js,
model.safetensors and the first 100 test images (test_images.u8, 28x28 bytes each, and test_labels.u8).
"""
import os, pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repository's root: examples/ is a package
import fusegrad
from fusegrad import Tensor, nn
from fusegrad.nn.datasets import mnist
from examples.beautiful_mnist import Model

HERE = pathlib.Path(__file__).resolve().parent

def export_mnist(model: Model, out_dir: pathlib.Path, n_test: int = 100) -> None:
  """Export model (moved to WEBGPU) for one 1x1x28x28 float32 image of pixels 0-255: (logits, probabilities)."""
  for t in nn.state.get_state_dict(model).values(): t.to_("WEBGPU").realize()
  def classify(x: Tensor) -> tuple[Tensor, Tensor]:
    logits = model(x)
    return logits, logits.softmax(-1)
  fusegrad.export.webgpu(classify, [Tensor.zeros(1, 1, 28, 28)], out_dir)
  _, _, X_test, Y_test = mnist()
  (out_dir / "test_images.u8").write_bytes(X_test[:n_test].numpy().tobytes())
  (out_dir / "test_labels.u8").write_bytes(Y_test[:n_test].numpy().tobytes())

if __name__ == "__main__":
  weights = sys.argv[1] if len(sys.argv) > 1 else str(HERE / "model" / "trained.safetensors")
  if not os.path.exists(weights):
    from examples import beautiful_mnist
    os.environ["SAVE"] = weights
    pathlib.Path(weights).parent.mkdir(exist_ok=True)
    beautiful_mnist.main()
  model = Model()
  nn.state.load_state_dict(model, nn.state.safe_load(weights))
  export_mnist(model, HERE / "model")
  print(f"exported to {HERE / 'model'}: serve {HERE} (python -m http.server -d {HERE}) and open it in a browser")
