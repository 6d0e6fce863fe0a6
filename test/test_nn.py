"""fusegrad.nn layers against torch.nn: torch's initialized weights are loaded into the fusegrad layer by state_dict
name, then forward outputs and the gradients of the input and of every parameter are compared."""
import math
import numpy as np
import pytest
import torch
from fusegrad import Tensor, TinyJit, dtypes
from fusegrad.nn import (Linear, Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d, BatchNorm, BatchNorm1d, BatchNorm2d,
                         LayerNorm, LayerNorm2d, GroupNorm, InstanceNorm, RMSNorm, Embedding, LSTMCell, optim, state,
                         datasets)
from fusegrad.nn.optim import Adam
from fusegrad.nn.state import get_parameters, get_state_dict, load_state_dict, torch_load, safe_save, safe_load

torch.set_num_threads(1)

def load_from_torch(layer, tlayer) -> None:
  """Copy torch's state_dict into layer by name (strict: the keys must be exactly torch's)."""
  load_state_dict(layer, {k: Tensor(v.detach().numpy()) for k, v in tlayer.state_dict().items()}, verbose=False)

def close(name: str, got, want, atol: float, rtol: float = 1e-4) -> None:
  got = got.numpy() if isinstance(got, Tensor) else np.asarray(got)
  want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
  assert got.shape == want.shape, f"{name}: shape {got.shape} != torch's {want.shape}"
  np.testing.assert_allclose(got, want, atol=atol, rtol=rtol, err_msg=name)

def check_layer(layer, tlayer, shape, atol=1e-5, grad_atol=1e-4, seed=0, training=False, x_np=None):
  """Same weights, same input: compare the output, then the gradients of a weighted sum of it w.r.t. the input and
  every torch parameter (by name)."""
  load_from_torch(layer, tlayer)
  rng = np.random.default_rng(seed)
  if x_np is None: x_np = rng.uniform(-2, 2, shape).astype(np.float32)
  tx, x = torch.tensor(x_np, requires_grad=True), Tensor(x_np, requires_grad=True)
  tlayer.train(training)
  tout = tlayer(tx)
  with Tensor.train(training): out = layer(x)
  close("forward", out, tout, atol)
  w = rng.uniform(0.5, 1.5, tuple(tout.shape)).astype(np.float32)
  (tout * torch.tensor(w)).sum().backward()
  (out * Tensor(w)).sum().backward()
  close("grad of input", x.grad, tx.grad, grad_atol)
  ours = get_state_dict(layer)
  for name, p in tlayer.named_parameters():
    assert ours[name].grad is not None, f"{name} got no gradient"
    close(f"grad of {name}", ours[name].grad, p.grad, grad_atol)
  return layer, tlayer

# *** linear ***

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6), (6,)])
def test_linear(bias, shape):
  check_layer(Linear(6, 5, bias=bias), torch.nn.Linear(6, 5, bias=bias), shape)

def test_linear_attributes_and_init():
  layer = Linear(64, 48)
  assert (layer.in_features, layer.out_features) == (64, 48)
  assert layer.weight.shape == (48, 64) and layer.bias.shape == (48,)
  assert layer.weight.requires_grad and layer.bias.requires_grad
  bound = 1 / math.sqrt(64)  # torch: kaiming_uniform_(a=sqrt(5)) and uniform bias, both 1/sqrt(fan_in)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
  assert abs(w.std() - bound / math.sqrt(3)) < 0.05 * bound and abs(w.mean()) < 0.05 * bound
  assert np.abs(b).max() <= bound and len(np.unique(b)) == 48
  assert Linear(3, 2, bias=False).bias is None

def test_linear_wrong_input():
  with pytest.raises(ValueError, match="Linear"): Linear(6, 5)(Tensor.ones(2, 4))

# *** convolutions ***

CONV2D_CASES = [
  dict(kernel_size=3),
  dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 0)),
  dict(kernel_size=3, padding="same", dilation=2),
  dict(kernel_size=2, padding="same"),
  dict(kernel_size=3, padding="valid", stride=2, bias=False),
  dict(kernel_size=3, groups=2, padding=1),
  dict(kernel_size=3, padding=2, padding_mode="reflect"),
  dict(kernel_size=(3, 2), padding=(1, 2), padding_mode="circular"),
  dict(kernel_size=3, padding=1, stride=2, padding_mode="replicate"),
]

@pytest.mark.parametrize("kw", CONV2D_CASES, ids=str)
def test_conv2d(kw):
  check_layer(Conv2d(4, 6, **kw), torch.nn.Conv2d(4, 6, **kw), (2, 4, 7, 6))

def test_conv2d_unbatched():
  check_layer(Conv2d(2, 3, 3), torch.nn.Conv2d(2, 3, 3), (2, 5, 5))

CONV1D_CASES = [
  dict(kernel_size=3),
  dict(kernel_size=3, stride=2, padding=1, dilation=2),
  dict(kernel_size=4, padding="same", groups=2, bias=False),
  dict(kernel_size=(3,), padding=(2,), padding_mode="reflect"),
]

@pytest.mark.parametrize("kw", CONV1D_CASES, ids=str)
def test_conv1d(kw):
  check_layer(Conv1d(4, 6, **kw), torch.nn.Conv1d(4, 6, **kw), (2, 4, 9))

def test_conv_attributes_and_init():
  layer = Conv2d(4, 8, (3, 5), stride=2, groups=2)
  assert layer.kernel_size == (3, 5) and layer.stride == 2 and layer.groups == 2
  assert layer.weight.shape == (8, 2, 3, 5) and layer.bias.shape == (8,)
  bound = 1 / math.sqrt(2 * 3 * 5)
  w = layer.weight.numpy()
  assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
  assert np.abs(layer.bias.numpy()).max() <= bound
  assert Conv1d(2, 3, 4).weight.shape == (3, 2, 4)
  t = ConvTranspose2d(4, 6, 3, groups=2)
  assert t.weight.shape == (4, 3, 3, 3)
  assert np.abs(t.weight.numpy()).max() <= 1 / math.sqrt(3 * 9)  # torch's fan_in: weight.shape[1] * prod(kernel)

def test_conv_bad_arguments():
  with pytest.raises(ValueError, match="groups"): Conv2d(3, 4, 3, groups=2)
  with pytest.raises(ValueError, match="padding_mode"): Conv2d(3, 4, 3, padding_mode="mirror")
  with pytest.raises(ValueError, match="conv2d"): Conv2d(3, 4, 3)(Tensor.ones(1, 2, 5, 5))
  with pytest.raises(ValueError, match="padding"): Conv2d(3, 4, 3, padding="full")
  with pytest.raises(ValueError, match="stride"): Conv2d(3, 4, 3, padding="same", stride=2)
  with pytest.raises(ValueError, match="padding"): Conv2d(3, 4, 3, padding=(1, 1, 1), padding_mode="reflect")(
    Tensor.ones(1, 3, 5, 5))

CONVT2D_CASES = [
  dict(kernel_size=3),
  dict(kernel_size=3, stride=2, padding=1, output_padding=1),
  dict(kernel_size=(2, 3), stride=(2, 3), padding=(0, 1), bias=False),
  dict(kernel_size=3, stride=2, dilation=2, groups=2, output_padding=1),
]

@pytest.mark.parametrize("kw", CONVT2D_CASES, ids=str)
def test_conv_transpose2d(kw):
  check_layer(ConvTranspose2d(4, 6, **kw), torch.nn.ConvTranspose2d(4, 6, **kw), (2, 4, 4, 3))

@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=4, stride=3, padding=1, output_padding=2),
                                dict(kernel_size=3, groups=2, dilation=2, bias=False)], ids=str)
def test_conv_transpose1d(kw):
  check_layer(ConvTranspose1d(4, 2, **kw), torch.nn.ConvTranspose1d(4, 2, **kw), (3, 4, 5))

def test_conv_transpose_output_size():
  layer, tlayer = ConvTranspose2d(2, 3, 3, stride=2, padding=1), torch.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1)
  load_from_torch(layer, tlayer)
  x_np = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
  for size in [(7, 7), (8, 7), (1, 3, 8, 8)]:
    close(f"output_size {size}", layer(Tensor(x_np), output_size=size), tlayer(torch.tensor(x_np), output_size=size),
          1e-5)
  with pytest.raises(ValueError, match="output_size"): layer(Tensor(x_np), output_size=(9, 9))

# *** batch norm ***

@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 5), (2, 3, 4, 5)])
def test_batchnorm_train_matches_torch(shape):
  check_layer(BatchNorm(3), torch.nn.BatchNorm1d(3) if len(shape) < 4 else torch.nn.BatchNorm2d(3), shape,
              training=True, grad_atol=2e-4)

def test_batchnorm_backward_is_two_sums():
  # torch's formula: sum(dy) and sum(dy * xhat) per channel (the bias's and weight's gradients), then dx elementwise;
  # the primitives through mean and variance took four sums over x's size
  layer, x = BatchNorm2d(3, track_running_stats=False), Tensor(np.ones((4, 3, 8, 8), np.float32), requires_grad=True)
  with Tensor.train(): out = layer(x.realize()).realize()
  (out * Tensor.rand(4, 3, 8, 8).realize()).sum().backward()
  kernels = Tensor.schedule(x.grad, layer.weight.grad, layer.bias.grad)
  assert len(kernels) == 3

def test_batchnorm_eval_uses_running_stats():
  layer, tlayer = BatchNorm2d(3), torch.nn.BatchNorm2d(3)
  rng = np.random.default_rng(1)
  with torch.no_grad():  # non-trivial running stats and affine parameters
    tlayer.running_mean.copy_(torch.tensor(rng.uniform(-1, 1, 3).astype(np.float32)))
    tlayer.running_var.copy_(torch.tensor(rng.uniform(0.5, 2, 3).astype(np.float32)))
    tlayer.weight.copy_(torch.tensor(rng.uniform(0.5, 2, 3).astype(np.float32)))
    tlayer.bias.copy_(torch.tensor(rng.uniform(-1, 1, 3).astype(np.float32)))
  check_layer(layer, tlayer, (2, 3, 4, 4), training=False)
  close("running_mean untouched in eval", layer.running_mean, tlayer.running_mean, 0)

@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_batchnorm_running_stats(momentum):
  layer, tlayer = BatchNorm2d(3, momentum=momentum), torch.nn.BatchNorm2d(3, momentum=momentum)
  rng = np.random.default_rng(2)
  for step in range(3):
    x_np = rng.normal(step, 1 + step, (4, 3, 3, 3)).astype(np.float32)
    tout = tlayer(torch.tensor(x_np))
    with Tensor.train(): out = layer(Tensor(x_np))
    close(f"step {step} output", out, tout, 1e-5)
    Tensor.realize(layer.running_mean, layer.running_var, layer.num_batches_tracked)
  close("running_mean", layer.running_mean, tlayer.running_mean, 1e-5)
  close("running_var", layer.running_var, tlayer.running_var, 1e-5)
  assert layer.num_batches_tracked.item() == tlayer.num_batches_tracked.item() == 3
  tlayer.eval()
  x_np = rng.normal(0, 1, (2, 3, 3, 3)).astype(np.float32)
  close("eval after training", layer(Tensor(x_np)), tlayer(torch.tensor(x_np)), 1e-5)

def test_batchnorm_updates_without_explicit_realize():
  # two training calls whose updates are still pending chain; reading the stats runs both
  layer, tlayer = BatchNorm1d(2), torch.nn.BatchNorm1d(2)
  rng = np.random.default_rng(3)
  for _ in range(2):
    x_np = rng.normal(1, 2, (5, 2)).astype(np.float32)
    tlayer(torch.tensor(x_np))
    with Tensor.train(): layer(Tensor(x_np))
  close("running_mean", layer.running_mean, tlayer.running_mean, 1e-5)
  close("running_var", layer.running_var, tlayer.running_var, 1e-5)

def test_batchnorm_options():
  layer = BatchNorm(3, affine=False)
  assert layer.weight is None and layer.bias is None
  tlayer = torch.nn.BatchNorm1d(3, affine=False)
  check_layer(layer, tlayer, (4, 3), training=True)
  # without running stats: batch statistics in eval too, and no running-stat keys
  layer, tlayer = BatchNorm(3, track_running_stats=False), torch.nn.BatchNorm1d(3, track_running_stats=False)
  assert layer.running_mean is None and set(get_state_dict(layer)) == set(tlayer.state_dict()) == {"weight", "bias"}
  check_layer(layer, tlayer, (4, 3, 2), training=False)

def test_batchnorm_state_and_errors():
  layer = BatchNorm2d(4)
  assert list(get_state_dict(layer)) == list(torch.nn.BatchNorm2d(4).state_dict())
  assert layer.running_mean.requires_grad is False and layer.weight.requires_grad
  assert layer.num_batches_tracked.dtype == dtypes.int64
  np.testing.assert_equal(layer.running_var.numpy(), np.ones(4))
  with pytest.raises(ValueError, match="BatchNorm"): layer(Tensor.ones(2, 3, 2, 2))
  with Tensor.train(), pytest.raises(ValueError, match="more than 1 value"): layer(Tensor.ones(1, 4))

def test_batchnorm_in_tinyjit():
  layer, tlayer = BatchNorm2d(3), torch.nn.BatchNorm2d(3)
  load_from_torch(layer, tlayer)

  @TinyJit
  def step(x: Tensor) -> Tensor:
    with Tensor.train(): out = layer(x)
    Tensor.realize(out, layer.running_mean, layer.running_var, layer.num_batches_tracked)
    return out

  rng = np.random.default_rng(4)
  for i in range(5):  # run, capture, then three replays
    x_np = rng.normal(i, 1 + i, (2, 3, 2, 3)).astype(np.float32)
    tout = tlayer(torch.tensor(x_np))
    out = step(Tensor(x_np))
    close(f"call {i} output", out, tout, 1e-4)
    close(f"call {i} running_mean", layer.running_mean, tlayer.running_mean, 1e-5)
    close(f"call {i} running_var", layer.running_var, tlayer.running_var, 1e-4)
    assert layer.num_batches_tracked.item() == i + 1
  assert step.cnt == 5

# *** other norms ***

@pytest.mark.parametrize("shape,normalized", [((3, 5), 5), ((2, 3, 4), (3, 4)), ((2, 2, 6), [6])])
def test_layernorm(shape, normalized):
  layer, tlayer = LayerNorm(normalized), torch.nn.LayerNorm(normalized)
  with torch.no_grad():  # non-trivial affine parameters
    tlayer.weight.uniform_(0.5, 1.5)
    tlayer.bias.uniform_(-1, 1)
  check_layer(layer, tlayer, shape)
  assert layer.normalized_shape == tuple(tlayer.normalized_shape)

def test_layernorm_options():
  layer = LayerNorm(4, eps=1e-3, elementwise_affine=False)
  assert layer.weight is None and get_state_dict(layer) == {}
  tlayer = torch.nn.LayerNorm(4, eps=1e-3, elementwise_affine=False)
  x_np = np.random.default_rng(0).normal(0, 0.05, (3, 4)).astype(np.float32)  # small values: eps matters
  close("forward", layer(Tensor(x_np)), tlayer(torch.tensor(x_np)), 1e-5)
  with pytest.raises(ValueError, match="LayerNorm"): LayerNorm(4)(Tensor.ones(2, 3))

def test_layernorm2d():
  layer, tlayer = LayerNorm2d(3), torch.nn.LayerNorm(3)
  with torch.no_grad():
    tlayer.weight.uniform_(0.5, 1.5)
    tlayer.bias.uniform_(-1, 1)
  load_from_torch(layer, tlayer)
  x_np = np.random.default_rng(0).normal(0, 1, (2, 3, 4, 5)).astype(np.float32)
  tx, x = torch.tensor(x_np, requires_grad=True), Tensor(x_np, requires_grad=True)
  tout, out = tlayer(tx.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), layer(x)
  close("forward", out, tout, 1e-5)
  tout.square().sum().backward()
  out.square().sum().backward()
  close("grad of input", x.grad, tx.grad, 1e-4)
  close("grad of weight", layer.weight.grad, tlayer.weight.grad, 1e-4)

@pytest.mark.parametrize("groups,shape", [(2, (2, 4, 5)), (1, (2, 4, 3, 3)), (4, (3, 4, 2, 2))])
def test_groupnorm(groups, shape):
  layer, tlayer = GroupNorm(groups, 4), torch.nn.GroupNorm(groups, 4)
  with torch.no_grad():
    tlayer.weight.uniform_(0.5, 1.5)
    tlayer.bias.uniform_(-1, 1)
  check_layer(layer, tlayer, shape)

def test_groupnorm_errors_and_options():
  with pytest.raises(ValueError, match="divisible"): GroupNorm(3, 4)
  with pytest.raises(ValueError, match="GroupNorm"): GroupNorm(2, 4)(Tensor.ones(1, 6, 2))
  layer = GroupNorm(2, 4, affine=False)
  assert get_state_dict(layer) == {}
  x_np = np.random.default_rng(0).normal(0, 1, (2, 4, 3)).astype(np.float32)
  close("forward", layer(Tensor(x_np)), torch.nn.GroupNorm(2, 4, affine=False)(torch.tensor(x_np)), 1e-5)

@pytest.mark.parametrize("shape,tcls", [((2, 3, 5), torch.nn.InstanceNorm1d), ((2, 3, 4, 3), torch.nn.InstanceNorm2d)])
def test_instancenorm(shape, tcls):
  layer, tlayer = InstanceNorm(3), tcls(3, affine=True)
  with torch.no_grad():
    tlayer.weight.uniform_(0.5, 1.5)
    tlayer.bias.uniform_(-1, 1)
  check_layer(layer, tlayer, shape)
  layer = InstanceNorm(3, affine=False)
  x_np = np.random.default_rng(0).normal(0, 1, shape).astype(np.float32)
  close("no affine", layer(Tensor(x_np)), tcls(3)(torch.tensor(x_np)), 1e-5)

@pytest.mark.parametrize("shape,dim", [((3, 6), 6), ((2, 3, 4), (3, 4))])
def test_rmsnorm(shape, dim):
  layer, tlayer = RMSNorm(dim, eps=1e-6), torch.nn.RMSNorm(dim, eps=1e-6)
  with torch.no_grad(): tlayer.weight.uniform_(0.5, 1.5)
  check_layer(layer, tlayer, shape)
  layer = RMSNorm(dim, eps=1e-2, elementwise_affine=False)
  x_np = np.random.default_rng(0).normal(0, 0.1, shape).astype(np.float32)
  close("no affine", layer(Tensor(x_np)), torch.nn.RMSNorm(dim, eps=1e-2, elementwise_affine=False)(torch.tensor(x_np)),
        1e-5)

# *** embedding ***

@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 2, 2), ()])
def test_embedding(shape):
  layer, tlayer = Embedding(7, 4), torch.nn.Embedding(7, 4)
  load_from_torch(layer, tlayer)
  rng = np.random.default_rng(0)
  idx = rng.integers(0, 7, shape)
  idx.flat[0] = 6  # the last row too
  if idx.size > 1: idx.flat[-1] = idx.flat[0]  # a repeated index: its gradient rows add up
  tout, out = tlayer(torch.tensor(idx)), layer(Tensor(idx.astype(np.int64 if idx.ndim == 2 else np.int32)))
  close("forward", out, tout, 0)
  w = rng.uniform(0.5, 1.5, tuple(tout.shape)).astype(np.float32)
  (tout * torch.tensor(w)).sum().backward()
  (out * Tensor(w)).sum().backward()
  close("grad of weight", layer.weight.grad, tlayer.weight.grad, 1e-5)

def test_embedding_init_and_errors():
  layer = Embedding(100, 50)
  assert (layer.vocab_sz, layer.embed_sz) == (100, 50) and layer.weight.shape == (100, 50)
  w = layer.weight.numpy()
  assert abs(w.std() - 1) < 0.05 and abs(w.mean()) < 0.05  # torch: normal(0, 1)
  with pytest.raises(TypeError, match="Embedding"): layer(Tensor([1.0, 2.0]))
  assert layer(Tensor.zeros(0, 3, dtype=dtypes.int32)).shape == (0, 3, 50)

# *** LSTM cell ***

@pytest.mark.parametrize("bias", [True, False])
def test_lstmcell(bias):
  layer, tlayer = LSTMCell(3, 5, bias=bias), torch.nn.LSTMCell(3, 5, bias=bias)
  load_from_torch(layer, tlayer)
  rng = np.random.default_rng(0)
  xs = [rng.normal(0, 1, (2, 3)).astype(np.float32) for _ in range(2)]
  tx = [torch.tensor(x, requires_grad=True) for x in xs]
  fx = [Tensor(x, requires_grad=True) for x in xs]
  th, fh = tlayer(tx[0]), layer(fx[0])  # zero state, then two steps carrying (h, c)
  for t, f in zip(tx[1:], fx[1:]):
    th, fh = tlayer(t, th), layer(f, fh)
  close("h", fh[0], th[0], 1e-5)
  close("c", fh[1], th[1], 1e-5)
  (th[0].sum() + 2 * th[1].square().sum()).backward()
  (fh[0].sum() + 2 * fh[1].square().sum()).backward()
  for i, (t, f) in enumerate(zip(tx, fx)): close(f"grad of x{i}", f.grad, t.grad, 1e-4)
  ours = get_state_dict(layer)
  for name, p in tlayer.named_parameters(): close(f"grad of {name}", ours[name].grad, p.grad, 1e-4)

def test_lstmcell_unbatched_and_init():
  layer, tlayer = LSTMCell(2, 3), torch.nn.LSTMCell(2, 3)
  load_from_torch(layer, tlayer)
  rng = np.random.default_rng(1)
  x, h, c = (rng.normal(0, 1, s).astype(np.float32) for s in [(2,), (3,), (3,)])
  th, tc = tlayer(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
  fh, fc = layer(Tensor(x), (Tensor(h), Tensor(c)))
  close("h", fh, th, 1e-5)
  close("c", fc, tc, 1e-5)
  big = LSTMCell(8, 64)
  for p in get_parameters(big):  # uniform(-1/sqrt(hidden), 1/sqrt(hidden))
    assert np.abs(p.numpy()).max() <= 0.125 and np.abs(p.numpy()).max() > 0.11
  assert big.weight_ih.shape == (256, 8) and big.weight_hh.shape == (256, 64) and big.bias_hh.shape == (256,)
  with pytest.raises(ValueError, match="LSTMCell"): layer(Tensor.ones(2, 3))
  with pytest.raises(ValueError, match="LSTMCell"): layer(Tensor.ones(2, 2), (Tensor.ones(2, 4), Tensor.ones(2, 4)))

# *** state dicts, parameters, training ***

LAYER_PAIRS = [
  (lambda: Linear(3, 4), lambda: torch.nn.Linear(3, 4)),
  (lambda: Linear(3, 4, bias=False), lambda: torch.nn.Linear(3, 4, bias=False)),
  (lambda: Conv1d(2, 4, 3), lambda: torch.nn.Conv1d(2, 4, 3)),
  (lambda: Conv2d(2, 4, 3, bias=False), lambda: torch.nn.Conv2d(2, 4, 3, bias=False)),
  (lambda: ConvTranspose1d(2, 4, 3), lambda: torch.nn.ConvTranspose1d(2, 4, 3)),
  (lambda: ConvTranspose2d(2, 4, 3), lambda: torch.nn.ConvTranspose2d(2, 4, 3)),
  (lambda: BatchNorm2d(3), lambda: torch.nn.BatchNorm2d(3)),
  (lambda: LayerNorm((2, 3)), lambda: torch.nn.LayerNorm((2, 3))),
  (lambda: GroupNorm(2, 4), lambda: torch.nn.GroupNorm(2, 4)),
  (lambda: InstanceNorm(3), lambda: torch.nn.InstanceNorm2d(3, affine=True)),
  (lambda: RMSNorm(4), lambda: torch.nn.RMSNorm(4)),
  (lambda: Embedding(5, 3), lambda: torch.nn.Embedding(5, 3)),
  (lambda: LSTMCell(2, 3), lambda: torch.nn.LSTMCell(2, 3)),
]

@pytest.mark.parametrize("make,make_torch", LAYER_PAIRS)
def test_state_dict_matches_torch(make, make_torch):
  layer, tlayer = make(), make_torch()
  ours, theirs = get_state_dict(layer), tlayer.state_dict()
  assert list(ours) == list(theirs)
  for k, v in theirs.items(): assert ours[k].shape == tuple(v.shape), k
  trainable = {k for k, _ in tlayer.named_parameters()}
  assert {k for k, v in ours.items() if v.requires_grad} == trainable
  assert len(get_parameters(layer)) == len(theirs)
  load_from_torch(layer, tlayer)
  for k, v in theirs.items(): np.testing.assert_equal(ours[k].numpy(), v.numpy(), err_msg=k)

def test_equal_initial_parameters_get_their_own_gradients():
  # two layers whose weights start as the same constant must still be separate tensors with separate gradients
  a, b = LayerNorm(3), LayerNorm(3)
  x = Tensor([[1.0, 2.0, 4.0]])
  (a(x).sum() * 0 + (b(x) * Tensor([1.0, 2.0, 3.0])).sum()).backward()
  np.testing.assert_allclose(a.weight.grad.numpy(), 0)
  assert np.abs(b.weight.grad.numpy()).max() > 0.1

def test_exports():
  import fusegrad.nn as nn
  assert nn.optim is optim and nn.state is state and nn.datasets is datasets
  assert BatchNorm2d is BatchNorm and nn.BatchNorm3d is BatchNorm

class TinyCNN:
  def __init__(self):
    self.c1, self.bn1 = Conv2d(1, 4, 3, padding=1, bias=False), BatchNorm2d(4)
    self.c2, self.ln = Conv2d(4, 4, 3, stride=2), GroupNorm(2, 4)
    self.l1 = Linear(4 * 3 * 3, 3)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.c1(x)).relu()
    x = self.ln(self.c2(x)).relu()
    return self.l1(x.flatten(1))

class TorchTinyCNN(torch.nn.Module):
  def __init__(self):
    super().__init__()
    self.c1, self.bn1 = torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4)
    self.c2, self.ln = torch.nn.Conv2d(4, 4, 3, stride=2), torch.nn.GroupNorm(2, 4)
    self.l1 = torch.nn.Linear(4 * 3 * 3, 3)
  def forward(self, x):
    x = self.bn1(self.c1(x)).relu()
    x = self.ln(self.c2(x)).relu()
    return self.l1(x.flatten(1))

def test_torch_checkpoint_loads_by_name(tmp_path):
  tmodel = TorchTinyCNN()
  with torch.no_grad():  # running stats that differ from their initial values
    tmodel.bn1.running_mean.uniform_(-1, 1)
    tmodel.bn1.running_var.uniform_(0.5, 2)
    tmodel.bn1.num_batches_tracked.fill_(7)
  torch.save(tmodel.state_dict(), tmp_path / "model.pt")
  model = TinyCNN()
  load_state_dict(model, torch_load(tmp_path / "model.pt"), verbose=False)
  assert model.bn1.num_batches_tracked.item() == 7
  x_np = np.random.default_rng(0).normal(0, 1, (2, 1, 7, 7)).astype(np.float32)
  tmodel.eval()
  close("eval forward", model(Tensor(x_np)), tmodel(torch.tensor(x_np)), 1e-5)
  # and back through safetensors into a fresh model
  safe_save(get_state_dict(model), tmp_path / "model.safetensors")
  again = TinyCNN()
  load_state_dict(again, safe_load(tmp_path / "model.safetensors"), verbose=False)
  close("after safetensors", again(Tensor(x_np)), tmodel(torch.tensor(x_np)), 1e-5)

def test_training_flag_picks_batchnorm_mode():
  layer = BatchNorm1d(2)
  x = Tensor([[0.0, 10.0], [2.0, 30.0]])
  np.testing.assert_allclose(layer(x).numpy(), x.numpy() / math.sqrt(1 + 1e-5), rtol=1e-6)  # eval: initial stats
  prev, Tensor.training = Tensor.training, True
  try: np.testing.assert_allclose(layer(x).numpy(), [[-1, -1], [1, 1]], atol=1e-4)  # training: batch stats
  finally: Tensor.training = prev
  np.testing.assert_allclose(layer.running_mean.numpy(), [0.1, 2.0], rtol=1e-6)

@pytest.mark.parametrize("jit", [False, True])
def test_small_cnn_trains_like_torch(jit):
  torch.manual_seed(0)  # torch's initial weights, not whatever state earlier tests in this process left its generator in
  model, tmodel = TinyCNN(), TorchTinyCNN()
  load_from_torch(model, tmodel)
  rng = np.random.default_rng(0)
  x_np, y_np = rng.normal(0, 1, (6, 1, 7, 7)).astype(np.float32), rng.integers(0, 3, 6)
  opt, topt = Adam(get_parameters(model), lr=0.01), torch.optim.Adam(tmodel.parameters(), lr=0.01)

  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    Tensor.realize(loss, *opt.schedule_step())  # the loss before the step, then the step (weights, running stats)
    return loss
  train_step = TinyJit(step) if jit else step

  losses = []
  with Tensor.train():
    for i in range(4 if jit else 3):  # with jit: run, capture, then replays
      topt.zero_grad()
      tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x_np)), torch.tensor(y_np))
      tloss.backward()
      topt.step()
      losses.append(train_step(Tensor(x_np), Tensor(y_np.astype(np.int32))).item())
      assert abs(losses[-1] - tloss.item()) < 1e-4, f"step {i}: loss {losses[-1]} != torch's {tloss.item()}"
  assert losses[-1] < losses[0]
  tstate = tmodel.state_dict()
  for k, v in get_state_dict(model).items(): close(k, v, tstate[k], 1e-4)  # weights and running stats after training

# *** conformance with tinygrad's package layout and torch's state dicts ***
def test_package_exposes_nn():  # tinygrad code writes `import tinygrad; tinygrad.nn.Linear(...)`
  import fusegrad
  layer = fusegrad.nn.Linear(3, 2)
  assert layer(fusegrad.Tensor.ones(4, 3)).shape == (4, 2) and fusegrad.nn.optim.SGD is optim.SGD

@pytest.mark.parametrize("cls,tcls,shape", [(BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 2, 2)), (BatchNorm1d, torch.nn.BatchNorm1d, (5, 3))])
def test_batchnorm_torch_state_dict_round_trip(cls, tcls, shape):
  rng = np.random.default_rng(0)
  tlayer = tcls(3)
  with torch.no_grad(): tlayer.weight.uniform_(0.5, 1.5), tlayer.bias.uniform_(-0.5, 0.5)
  for _ in range(2): tlayer(torch.tensor(rng.standard_normal(shape).astype(np.float32)))  # stats and a batch count of 2
  layer = cls(3)
  load_from_torch(layer, tlayer)
  sd = get_state_dict(layer)
  assert sorted(sd) == sorted(tlayer.state_dict()) and sd["num_batches_tracked"].dtype == dtypes.int64
  for k, v in tlayer.state_dict().items(): np.testing.assert_allclose(sd[k].numpy(), v.numpy(), rtol=1e-6, err_msg=k)
  x = rng.standard_normal(shape).astype(np.float32)
  with Tensor.train():
    layer(Tensor(x)).realize()
    for v in sd.values(): v.realize()
  tlayer(torch.tensor(x))
  for k, v in tlayer.state_dict().items(): np.testing.assert_allclose(get_state_dict(layer)[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
  assert layer.num_batches_tracked.item() == 3
  tlayer2 = tcls(3)  # and back into torch
  tlayer2.load_state_dict({k: torch.tensor(v.numpy()) for k, v in get_state_dict(layer).items()})
  assert tlayer2.num_batches_tracked.item() == 3

def test_norms_keep_a_half_inputs_dtype_as_torch():
  from fusegrad import nn
  # float32 weights on a float16 input: torch computes in float32 and gives float16 back (fusegrad gave float32)
  x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
  pairs = [(nn.RMSNorm(3, eps=1e-6), torch.nn.RMSNorm(3, eps=1e-6)), (nn.LayerNorm(3), torch.nn.LayerNorm(3)),
           (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)), (nn.BatchNorm(4), torch.nn.BatchNorm1d(4).eval())]
  for ours, theirs in pairs:
    got, want = ours(Tensor(x).half()), theirs(torch.tensor(x).half()).detach()
    assert got.dtype == dtypes.float16 and want.dtype == torch.float16, type(ours).__name__
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=2e-3, rtol=2e-3)
    assert ours(Tensor((x * 10).astype(np.int32))).dtype == dtypes.float32  # (ints normalize to floats, as before)
  # RMSNorm of ints came out as ints (0, 0, 1), weighted or not
  got = nn.RMSNorm(3, elementwise_affine=False)(Tensor([[1, 2, 3]]))
  want = torch.nn.functional.rms_norm(torch.tensor([[1.0, 2.0, 3.0]]), (3,), eps=1e-6)
  assert got.dtype == dtypes.float32 and np.allclose(got.numpy(), want.numpy(), atol=1e-6)
