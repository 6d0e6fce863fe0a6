"""Tensors spread over several devices (fusegrad/engine/multi.py): every result, forward and backward, equals the
one-device result, on CPU devices, on PYTHON devices and on a mix of CPU and CL."""
import os, subprocess, sys, threading, time
import numpy as np
import pytest
from fusegrad import Tensor, Device, TinyJit, Context, Variable, nn
from fusegrad.nn.optim import SGD, Adam
from fusegrad.nn.state import get_parameters, get_state_dict
from fusegrad.engine.state import STATE
from fusegrad.runtime.ops_cpu import CopyBetweenWorkers

def cpu_works() -> bool: return Device.get_available("CPU")[0]

DEVICE_SETS = [pytest.param(("CPU:1", "CPU:2"), marks=pytest.mark.skipif(not cpu_works(), reason="needs a C compiler")),
               ("PYTHON:1", "PYTHON:2")]

def rand(*shape: int, seed: int = 0) -> np.ndarray: return np.random.default_rng(seed).standard_normal(shape, "float32")

def check(fn, *arrays: np.ndarray, devices, axes, atol: float = 1e-5) -> None:
  """fn on tensors spread over devices (array i split on axes[i], None: replicated) equals fn on one device, and so do
  the gradients of its sum."""
  one = [Tensor(a, requires_grad=True) for a in arrays]
  spread = [Tensor(a).shard(devices, ax) for a, ax in zip(arrays, axes)]
  for t in spread: t.requires_grad = True
  want, got = fn(*one), fn(*spread)
  assert got.device == tuple(devices) and got.shape == want.shape
  np.testing.assert_allclose(got.numpy(), want.numpy(), atol=atol, rtol=1e-5)
  want.sum().backward()
  got.sum().backward()
  for a, b in zip(one, spread):
    assert b.grad is not None and b.grad.device == tuple(devices)
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), atol=atol, rtol=1e-5)

# *** devices named with an index ***
class TestDeviceNames:
  def test_indexed_devices_are_separate(self):
    assert Device.canonicalize("CPU:0") == "CPU" and Device.canonicalize("python:01") == "PYTHON:1"
    assert Device["PYTHON:1"] is not Device["PYTHON"] and Device["PYTHON:1"].device == "PYTHON:1"
    a = Tensor([1.0, 2.0], device="PYTHON:1")
    b = a.to("PYTHON:2") * 2
    assert b.device == "PYTHON:2" and b.tolist() == [2.0, 4.0]
    assert a.uop.base.arg.device == "PYTHON:1"  # its own buffer
    assert Tensor([3.0], device=f"{Device.DEFAULT}:3").device == f"{Device.DEFAULT}:3"

def cl_works() -> bool: return cpu_works() and Device.get_available("CL")[0]
MIXED = pytest.param(("CPU:1", "CL"), marks=pytest.mark.skipif(not cl_works(), reason="needs the CPU and OpenCL"))

@pytest.mark.parametrize("devices", [*DEVICE_SETS, MIXED])  # every op family also on a mix of CPU and CL
class TestSharded:
  def test_shard_and_gather(self, devices):
    x = rand(4, 3)
    t = Tensor(x).shard(devices, axis=0)
    assert t.device == devices and t.shape == (4, 3) and [s.shape for s in t.uop.src] == [(2, 3), (2, 3)]
    np.testing.assert_equal(t.numpy(), x)
    np.testing.assert_equal(t.to("PYTHON").numpy(), x)
    r = Tensor(x).to(devices)
    assert r.device == devices and [s.shape for s in r.uop.src] == [(4, 3), (4, 3)]
    assert Tensor([2.5]).to(devices).sum().item() == 2.5
    s = Tensor(x)
    s.shard_(devices, -1 + 1)
    assert s.device == devices

  def test_elementwise(self, devices):
    check(lambda a, b: (a * b + a.exp()).relu() / (b.abs() + 1), rand(4, 3), rand(4, 3, seed=1), devices=devices,
          axes=(0, None))
    check(lambda a, b: a.where(a > 0, b) - b.sigmoid(), rand(4, 2), rand(4, 2, seed=1), devices=devices, axes=(0, 1))

  def test_movement(self, devices):
    check(lambda a: a.reshape(2, 2, 6).permute(2, 0, 1).pad(((1, 1), (0, 0), (0, 0))), rand(4, 6), devices=devices,
          axes=(0,))
    check(lambda a: a.T.flip(0)[1:3].reshape(-1), rand(4, 6), devices=devices, axes=(0,))  # flip, shrink: gathered
    check(lambda a: a.reshape(4, 1, 6).expand(4, 3, 6), rand(4, 6), devices=devices, axes=(0,))

  def test_reduce(self, devices):
    check(lambda a: a.sum(0) + a.max(0) + a.mean(), rand(4, 6), devices=devices, axes=(0,))  # all-reduced
    check(lambda a: a.sum(1) * a.max(1), rand(4, 6), devices=devices, axes=(0,))  # each device alone
    check(lambda a: a.softmax(0), rand(6, 4), devices=devices, axes=(1,))
    x = Tensor(rand(8, 5)).shard(devices, 0)
    assert x.argmax(0).tolist() == rand(8, 5).argmax(0).tolist()

  def test_matmul_conv(self, devices):
    check(lambda a, w: a @ w, rand(4, 3), rand(3, 5, seed=1), devices=devices, axes=(0, None))
    check(lambda a, w: a @ w, rand(4, 6), rand(6, 2, seed=1), devices=devices, axes=(1, 0))  # model parallel
    check(lambda x, w: x.conv2d(w, padding=1).max_pool2d(), rand(2, 2, 4, 4), rand(3, 2, 3, 3, seed=1),
          devices=devices, axes=(0, None), atol=1e-4)

  def test_cat_stack_losses(self, devices):
    check(lambda a, b: a.cat(b, dim=1), rand(4, 2), rand(4, 3, seed=1), devices=devices, axes=(0, 0))
    check(lambda a, b: Tensor.stack(a, b).sum(0), rand(4, 2), rand(4, 2, seed=1), devices=devices, axes=(0, 0))
    y = np.array([0, 2, 1, 2])
    check(lambda a: a.sparse_categorical_crossentropy(Tensor(y).shard(devices, 0) if isinstance(a.device, tuple)
                                                      else Tensor(y)), rand(4, 3), devices=devices, axes=(0,))
    check(lambda a, b: (a - b).square().mean() + a.sigmoid().binary_crossentropy(b.sigmoid()), rand(4, 2),
          rand(4, 2, seed=1), devices=devices, axes=(0, 0))

  def test_random_and_indexing(self, devices):
    Tensor.manual_seed(5)
    want = [Tensor.rand(4, 3).numpy(), Tensor.randint(6, high=9).numpy()]
    Tensor.manual_seed(5)
    got = [Tensor.rand(4, 3, device=devices), Tensor.randint(6, high=9, device=devices)]
    assert all(g.device == devices for g in got)
    for g, w in zip(got, want): np.testing.assert_equal(g.numpy(), w)
    x, idx = rand(10, 2), np.array([1, 3, 5, 9])
    np.testing.assert_equal(Tensor(x).to(devices)[Tensor(idx).shard(devices, 0)].numpy(), x[idx])

  def test_gradient_through_gather(self, devices):
    x, w0 = rand(4, 3), rand(3, 2, seed=1)
    w = Tensor(w0, requires_grad=True)
    w.to_(devices).realize()
    loss = (Tensor(x).shard(devices, 0) @ w).to("PYTHON").square().sum()  # gathered on one device, then the loss
    loss.backward()
    assert w.grad is not None and w.grad.device == devices
    np.testing.assert_allclose(loss.item(), np.square(x @ w0).sum(), rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.T @ (x @ w0), rtol=1e-5, atol=1e-5)

  def test_errors(self, devices):
    with pytest.raises(IndexError): Tensor.ones(4, 2).shard(devices, 2)
    with pytest.raises(RuntimeError, match=r"\(3, 2\).*2 devices"): Tensor.ones(3, 2).shard(devices, 0)
    with pytest.raises(ValueError, match="different devices"):
      Tensor.ones(4).shard(devices, 0) + Tensor.ones(4).shard((devices[0], devices[0][:-1] + "3"), 0)
    with pytest.raises(ValueError, match="different devices"): Tensor.ones(4).shard(devices, 0) + Tensor.ones(4)

def test_three_devices_and_gradient_through_shard():
  devices, x = ("PYTHON:1", "PYTHON:2", "PYTHON:3"), rand(6, 4)
  t = Tensor(x, requires_grad=True)
  out = (t.shard(devices, 0).square()).sum(0)  # a ring of three
  np.testing.assert_allclose(out.numpy(), np.square(x).sum(0), rtol=1e-5)
  out.sum().backward()
  assert t.grad is not None and t.grad.device == t.device
  np.testing.assert_allclose(t.grad.numpy(), 2 * x, rtol=1e-5)

def _train(devices, steps: int) -> tuple:
  """A few SGD steps of linear -> batchnorm -> cross entropy, the batch split on axis 0 when devices are given."""
  Tensor.manual_seed(3)
  layers = [nn.Linear(3, 4), nn.BatchNorm(4)]
  if devices:
    for t in get_state_dict(layers).values(): t.to_(devices)
  opt = SGD(get_parameters(layers), lr=0.1, momentum=0.9)
  x, y = Tensor(rand(4, 3)), Tensor([0, 1, 3, 2])
  if devices: x, y = x.shard(devices, 0), y.shard(devices, 0)
  with Tensor.train():
    for _ in range(steps):
      opt.zero_grad()
      layers[1](layers[0](x)).sparse_categorical_crossentropy(y).backward()
      opt.step()
  return layers[0].weight.numpy(), layers[1].running_mean.numpy(), layers[1].running_var.numpy()

@pytest.mark.parametrize("devices", DEVICE_SETS)
def test_data_parallel_training(devices):
  for want, got in zip(_train(None, 2), _train(devices, 2)): np.testing.assert_allclose(got, want, atol=1e-5)

@pytest.mark.parametrize("make_opt", [lambda ps: Adam(ps, lr=0.1), lambda ps: SGD(ps, lr=0.1, momentum=0.9)])
def test_optimizer_keeps_split_parameters_split(make_opt):
  devices, w0, x = DEVICE_SETS[1], rand(4, 3), rand(2, 4, seed=1)
  results = []
  for devs in (None, devices):
    w = Tensor(w0, requires_grad=True)
    if devs: w.shard_(devs, 0).realize()
    opt = make_opt([w])
    with Tensor.train():
      for _ in range(2):
        opt.zero_grad()
        ((Tensor(x).to(devs) if devs else Tensor(x)) @ w).square().sum().backward()
        opt.step()
    results.append(w.numpy())
  assert w.uop.arg == 0 and [s.shape for s in w.uop.src] == [(2, 3), (2, 3)]  # model parallel: still split
  np.testing.assert_allclose(results[1], results[0], atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("devices", DEVICE_SETS[:1])
def test_jit_replays_multi_device_step(devices):
  def run(devs):
    w = Tensor([1.0, 2.0, 3.0, 4.0]).contiguous().realize()
    if devs: w.to_(devs).realize()
    @TinyJit
    def step(x: Tensor) -> Tensor:
      w.assign(w + x.sum())
      return (x * w).realize()
    outs = []
    for i in range(4):
      x = Tensor.arange(4).float().add(i).contiguous()
      outs.append(step(x.shard(devs, 0).realize() if devs else x.realize()).numpy())
    return outs, w.numpy(), step
  (want, want_w, _), (got, got_w, jit) = run(None), run(devices)
  assert jit.captured is not None
  np.testing.assert_allclose(np.stack(got), np.stack(want))
  np.testing.assert_allclose(got_w, want_w)

def test_data_parallel_step_copies_aside_what_one_device_does():
  """Each device's part of a data-parallel step copies aside (engine/state.py snapshot_before) the versions that one
  device's step does, no more: while the parts of an optimizer step run, the tensors spread over devices no longer hold
  the old versions of their momentum and running statistics (which were all copied, at each replay)."""
  def same_device_copies(devices) -> int:
    Tensor.manual_seed(3)
    layers = [nn.Linear(3, 4), nn.BatchNorm(4)]
    if devices:
      for t in get_state_dict(layers).values(): t.to_(devices).realize()
    opt = SGD(get_parameters(layers), lr=0.1, momentum=0.9)
    x, y = Tensor(rand(4, 3)), Tensor([0, 1, 3, 2])
    if devices: x, y = x.shard(devices, 0), y.shard(devices, 0)
    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor:
      with Tensor.train():
        opt.zero_grad()
        loss = layers[1](layers[0](x)).sparse_categorical_crossentropy(y).backward()
        opt.step()
        return loss
    for _ in range(3): step(x.realize(), y.realize())
    return sum("copy" in ei.runner.name and ei.bufs[0].device == ei.bufs[1].device for ei in step.jit_cache)

  with Context(DEV="PYTHON"): assert same_device_copies(DEVICE_SETS[1]) == 2 * same_device_copies(None)

def test_devices_compute_their_parts_before_the_copies():
  """In a reduce across devices (a ring of three) each device computes its part before the copies between them (in
  depth-first order a device's part came after the copy into it, and CPU workers took turns); the sum is still right."""
  devices, x = ("PYTHON:1", "PYTHON:2", "PYTHON:3"), rand(6, 6)
  step = TinyJit(lambda t: (t.exp() * 2).sum(0).realize())
  for _ in range(3): out = step(Tensor(x).shard(devices, 0).realize())
  np.testing.assert_allclose(out.numpy(), (np.exp(x) * 2).sum(0), rtol=1e-5)
  first_copy = next(i for i, ei in enumerate(step.jit_cache) if "copy" in ei.runner.name)
  assert {ei.bufs[0].device for ei in step.jit_cache[:first_copy]} == set(devices)

def test_debug_shows_each_kernels_device(capsys):
  devices = DEVICE_SETS[1]
  with Context(DEBUG=2): (Tensor([1.0, 2.0]).shard(devices, 0) + 1).realize()
  out = capsys.readouterr().out
  assert "PYTHON:1" in out and "PYTHON:2" in out

def test_reading_a_tensor_while_a_realize_spreads_it():
  """While a realize spreads tensors over devices they hold a stand-in (engine/realizer.py _realize_multi): another
  thread that reads one meanwhile gets its shape and device, and waits for the realize to build from it; the
  realizing thread itself may not read it."""
  devices, x, seen = DEVICE_SETS[1], rand(4, 2), {}
  w = Tensor(x).shard(devices, 0) * 2
  def read() -> None:
    seen["shape"], seen["device"] = w.shape, w.device
    seen["values"] = (w + 1).sum(1).numpy()
  reader = threading.Thread(target=read)
  def meanwhile(_) -> None:
    if reader.ident is not None: return
    reader.start()
    reader.join(0.5)
    seen["waited"] = reader.is_alive()
    with pytest.raises(RuntimeError, match="its own realize"): w + 1
  STATE.realize_hooks.append(meanwhile)
  try: w.realize()
  finally: STATE.realize_hooks.remove(meanwhile)
  reader.join(60)
  assert seen["waited"] and seen["shape"] == (4, 2) and seen["device"] == devices
  np.testing.assert_allclose(seen["values"], (x * 2 + 1).sum(1), rtol=1e-6)

# *** CPU devices run their kernels at once (runtime/ops_cpu.py Worker) ***
needs_cpu = pytest.mark.skipif(not cpu_works(), reason="needs a C compiler")

@needs_cpu
def test_cpu_devices_run_at_once():
  """CPU:1 and CPU:2 each run their launches on a thread of their own: two launches that each wait for the other end
  (run one after the other, the first would time out)."""
  met, done = (threading.Event(), threading.Event()), []
  def meet(mine: threading.Event, other: threading.Event) -> None:
    mine.set()
    done.append(other.wait(30))
  Device["CPU:1"].worker.launch(meet, met, ())
  Device["CPU:2"].worker.launch(meet, met[::-1], ())
  assert Device["CPU"].worker is None  # CPU itself runs kernels in the calling thread
  Device["CPU:1"].synchronize()
  Device["CPU:2"].synchronize()
  assert done == [True, True]

@needs_cpu
def test_copies_wait_for_both_devices():
  """A chain of kernels and copies back and forth between two workers, never waited for on the host until the end."""
  x = rand(64, 64)
  a, want = Tensor(x).to("CPU:1"), x.astype(np.float64)
  for i in range(6):
    a = ((a @ a.T) * 0.01 + 1).to(f"CPU:{1 + (i + 1) % 2}").realize()
    want = (want @ want.T) * 0.01 + 1
  np.testing.assert_allclose(a.numpy(), want, rtol=1e-4)

@needs_cpu
def test_jit_replays_copies_between_workers():
  """A replay's copies between CPU workers are bound once (runtime/ops_cpu.py CopyBetweenWorkers) and queued again at
  each replay, with no wait on the host: a small one through a staging buffer, one of 1 MB and more from its source;
  those that read an input or write a result are bound again to this replay's buffers, keeping their staging buffer.
  Each replay's values arrive, results of earlier replays keep theirs."""
  step = TinyJit(lambda a, b: (((a + 1).to("CPU:2") * 2 + (b + 1).to("CPU:2")).realize(), b.to("CPU:2").realize()))
  outs, wants, stagings = [], [], []
  for i in range(5):
    x, y = rand(300_000, seed=i), rand(1, seed=10 + i)  # 1.2 MB, 4 bytes
    outs += step(Tensor(x, device="CPU:1").realize(), Tensor(y, device="CPU:1").realize())
    wants += [(x + 1) * 2 + (y + 1), y]
    if step.captured: stagings.append([id(c.staging) for c in step._plan().calls if isinstance(c, CopyBetweenWorkers)])
  assert sum("copy" in ei.runner.name for ei in step.jit_cache) == 3 and len(stagings[0]) == 3
  assert all(s == stagings[0] for s in stagings)
  for out, want in zip(outs, wants): np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)

def _filled(device: str, values: np.ndarray):
  (buf := Device[device].allocator.alloc(values.nbytes))
  Device[device].allocator.copyin(buf, memoryview(values.tobytes()))
  return buf

def _read(device: str, buf, like: np.ndarray) -> np.ndarray:
  Device[device].allocator.copyout(memoryview(out := np.empty_like(like)).cast("B"), buf)
  return out

@needs_cpu
def test_exchange_sends_before_it_receives():
  """A 2-device all-reduce's pair of copies, each way between two workers: each worker queues its send (snapshot)
  before its receive, so CPU:1 sends while CPU:2 is still busy (queued the other way round, it would wait for CPU:2's
  send first, and send only once CPU:2 is done)."""
  x, y = rand(4), rand(4, seed=1)
  a1, a2, b1, b2 = _filled("CPU:1", x), _filled("CPU:2", y), _filled("CPU:1", 0 * x), _filled("CPU:2", 0 * y)
  busy = threading.Event()
  Device["CPU:2"].worker.launch(busy.wait, (30,), ())
  to1 = Device["CPU:1"].allocator.copy_launcher(b1, Device["CPU:2"].allocator, a2, 16)
  to2 = Device["CPU:2"].allocator.copy_launcher(b2, Device["CPU:1"].allocator, a1, 16)
  to1()
  to2()
  Device["CPU:1"].worker.launch(lambda: None, (), ())  # a kernel after them: both copies are queued now
  deadline = time.monotonic() + 10  # till CPU:1's snapshot is in the staging buffer (worker_run.c: its flag full)
  while not (sent := Device["CPU:1"].worker.lib.dll.fg_full(to2.pair)) and time.monotonic() < deadline: time.sleep(1e-3)
  busy.set()
  assert sent
  np.testing.assert_equal(_read("CPU:1", b1, x), y)
  np.testing.assert_equal(_read("CPU:2", b2, y), x)

@needs_cpu
def test_copy_of_a_copy_between_workers():
  """CPU:1 -> CPU:2, then that buffer CPU:2 -> CPU:3: the second's send waits for the first's receive (a send isn't
  queued ahead of a receive into what it reads)."""
  x = rand(1000)
  src, mid, dest = _filled("CPU:1", x), _filled("CPU:2", 0 * x), _filled("CPU:3", 0 * x)
  Device["CPU:2"].allocator.copy_launcher(mid, Device["CPU:1"].allocator, src, x.nbytes)()
  Device["CPU:3"].allocator.copy_launcher(dest, Device["CPU:2"].allocator, mid, x.nbytes)()
  np.testing.assert_equal(_read("CPU:3", dest, x), x)

@needs_cpu
def test_sync_from_another_thread_during_exchanges():
  """Another thread waiting for CPU:1 and CPU:2 again and again while TinyJit replays a step full of exchanges (the
  copies held back behind their snapshots are queued under the realize's lock): no error, every result right."""
  x = rand(8, 32)
  step = TinyJit(lambda t: (t.shard(("CPU:1", "CPU:2"), axis=0) * 2).sum(0).realize())
  stop, errors = threading.Event(), []
  def syncing() -> None:
    try:
      while not stop.is_set():
        for d in ("CPU:1", "CPU:2"): Device[d].synchronize()
    except Exception as e: errors.append(e)
  (other := threading.Thread(target=syncing)).start()
  try: outs = [step(Tensor(x + i)).numpy() for i in range(30)]
  finally:
    stop.set()
    other.join()
  assert not errors
  for i, out in enumerate(outs): np.testing.assert_allclose(out, ((x + i) * 2).sum(0), rtol=1e-5)

FORK_SCRIPT = """
import os
import numpy as np
from fusegrad import Tensor
x = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
t = Tensor(x, device="CPU:1")
y = (t @ t).realize()  # queued on CPU:1's worker: the fork waits for it
pid = os.fork()
if pid == 0:
  ok = np.allclose(y.numpy(), x @ x, atol=1e-3) and np.allclose(((t + 1) * 2).numpy(), (x + 1) * 2)
  os._exit(0 if ok else 3)
print(os.waitpid(pid, 0)[1] >> 8)
"""

@needs_cpu
def test_fork_with_cpu_workers():
  """A child forked while CPU:1's worker has kernels queued sees their results and runs kernels on a new worker."""
  r = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True, timeout=120,
                     env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))})
  assert r.returncode == 0 and r.stdout.split()[-1] == "0", r.stdout + r.stderr[-2000:]

def test_a_window_at_a_variable_of_a_sharded_tensor_reads_and_assigns():
  devs = (f"{Device.DEFAULT}:0", f"{Device.DEFAULT}:1")
  out = Tensor.zeros(4, 4).contiguous().realize().shard(devs, 0).realize()
  def write(i):
    out[:, i:i + 1].assign(Tensor.ones(4, 1).shard(devs, 0).contiguous() * 2)
    return out[:, i:i + 1].contiguous().realize()
  jit = TinyJit(write)
  for k in range(4):
    assert jit(Variable("i", 0, 3).bind(k)).tolist() == [[2.0]] * 4
    assert out.tolist() == [[2.0] * (k + 1) + [0.0] * (3 - k)] * 4
  assert write(Variable("i", 0, 3).bind(1)).tolist() == [[2.0]] * 4  # eager too

def test_setitem_on_tensors_across_devices_as_tinygrad():
  d4 = tuple(f"{Device.DEFAULT}:{i}" for i in range(4))
  for axis in (0, None):
    t = Tensor.arange(16).contiguous().realize().shard(d4, axis=axis)
    t[1] = 99
    t[6:10] = Tensor([7, 7, 7, 7])
    assert t.tolist() == [0, 99, 2, 3, 4, 5, 7, 7, 7, 7, 10, 11, 12, 13, 14, 15]
    assert t.device == Device.canonicalize(d4) and t.uop.axis == axis  # split as it was

def test_like_constructors_keep_the_split_and_shard_like():
  d2 = (f"{Device.DEFAULT}:1", f"{Device.DEFAULT}:2")
  t = Tensor.arange(16.0).reshape(8, 2).shard(d2, axis=0)
  for r in (t.full_like(3.0), t.zeros_like(), t.ones_like(), t.rand_like()):
    assert r.device == Device.canonicalize(d2) and r.realize().uop.axis == 0 and r.shape == (8, 2)
  assert t.ones_like(device="CPU").device == "CPU"
  assert Tensor.ones(8, 2).shard_like(t).realize().uop.axis == 0 and Tensor.ones(2).shard_like(Tensor([1])).device == "CPU"
  one = Tensor([1.0, 2.0]).shard((f"{Device.DEFAULT}:1",), 0)  # one device: a plain tensor there
  assert one.device == f"{Device.DEFAULT}:1" and (one + Tensor([1.0, 1.0], device=one.device)).tolist() == [2.0, 3.0]

def test_schedule_and_linear_with_vars_of_a_graph_across_devices():
  d2 = (f"{Device.DEFAULT}:1", f"{Device.DEFAULT}:2")
  x = Tensor.arange(16).reshape(4, 4).realize().shard(d2, 0)[0:2].contiguous()
  items, var_vals = x.linear_with_vars()
  assert items and var_vals == {} and len(x.schedule_linear()) == len(items)
  assert x.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]

@pytest.mark.parametrize("axis", [None, 0])
def test_a_view_assign_into_a_sharded_constant_lands(axis):
  # Tensor.zeros(...).shard(...) realized is still a constant per device: the write through a view was lost, silently
  devs = (f"{Device.DEFAULT}:0", f"{Device.DEFAULT}:1")
  out = Tensor.zeros(4, 4).shard(devs, axis).realize()
  out[:, 2:3].assign(Tensor.ones(4, 1).contiguous().shard(devs, axis)).realize()
  assert out.tolist() == [[0.0, 0.0, 1.0, 0.0]] * 4
