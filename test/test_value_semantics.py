"""Value semantics under in-place updates (DESIGN.md invariant 10), checked against an eager NumPy model on random
sequences of ops, assigns, writes through views and realizes: a lazy tensor computes from the values its inputs had
when it was built; a view of a buffer shows the buffer's contents now."""
import random
import numpy as np
import pytest
from fusegrad import Tensor

DEV, SHAPE = "PYTHON", (3, 4)  # tiny tensors on the interpreter: no compiler in the loop

# views of a (3, 4) tensor that keep its shape: (on a Tensor, on a numpy array)
VIEWS = [(lambda t: t.flip(0), lambda a: a[::-1]),
         (lambda t: t.flip(1), lambda a: a[:, ::-1]),
         (lambda t: t[1:].pad(((0, 1), (0, 0))), lambda a: np.pad(a[1:], ((0, 1), (0, 0)))),
         (lambda t: t.reshape(4, 3).reshape(3, 4), lambda a: a)]
# ops on two (3, 4) values
OPS = [(lambda a, b: a + b, lambda a, b: a + b),
       (lambda a, b: (a * b).tanh(), lambda a, b: np.tanh(a * b)),
       (lambda a, b: a - b.sum(0, keepdim=True), lambda a, b: a - b.sum(0, keepdims=True)),
       (lambda a, b: (a @ b.T) @ a * 0.1, lambda a, b: (a @ b.T) @ a * 0.1),
       (lambda a, b: a.flip(1) * 0.5 + b.cumsum(1) * 0.25, lambda a, b: a[:, ::-1] * 0.5 + b.cumsum(1) * 0.25)]

class Model:
  """Tensors beside what NumPy says they hold: buffers (realized, assigned to), lazy values, views of buffers."""
  def __init__(self, rng: random.Random):
    self.rng = rng
    self.bufs: list[tuple[Tensor, list]] = []  # (tensor, [its numpy value]) (a list: views see updates)
    self.values: list[tuple[Tensor, np.ndarray]] = []  # lazy (or realized) values: fixed when built
    self.views: list[tuple[Tensor, list, object]] = []  # (view, its buffer's numpy box, numpy view function)
    self.log: list[str] = []  # what was done, for the failure message
    for _ in range(3): self.new_buffer()

  def rand(self) -> np.ndarray: return np.array([[self.rng.uniform(-1, 1) for _ in range(4)] for _ in range(3)], np.float32)
  def new_buffer(self) -> None:
    a = self.rand()
    self.bufs.append((Tensor(a, device=DEV).realize(), [a]))
  def operand(self) -> tuple[Tensor, np.ndarray]:
    """Any tensor with its value now."""
    kind = self.rng.choice(["buf", "value", "view"] if self.views else ["buf", "value"])
    if kind == "buf" or (kind == "value" and not self.values):
      i = self.rng.randrange(len(self.bufs))
      self.log.append(f"buf{i}")
      return self.bufs[i][0], self.bufs[i][1][0]
    if kind == "value":
      i = self.rng.randrange(len(self.values))
      self.log.append(f"value{i}")
      return self.values[i]
    i = self.rng.randrange(len(self.views))
    v, box, fn = self.views[i]
    self.log.append(f"view{i}")
    return v, fn(box[0])

  def step(self) -> str:
    what = self.rng.choice(["op", "op", "view", "assign", "assign", "assign_view", "setitem", "realize", "check"])
    self.log.append(what)
    if what == "op":
      (a, na), (b, nb) = self.operand(), self.operand()
      f, nf = self.rng.choice(OPS)
      self.values.append((f(a, b), nf(na, nb).astype(np.float32)))
    elif what == "view":
      t, box = self.rng.choice(self.bufs)
      f, nf = self.rng.choice(VIEWS)
      self.views.append((f(t), box, nf))
    elif what == "assign":  # lazy: realized later (or by whatever reads it)
      i = self.rng.randrange(len(self.bufs))
      t, box = self.bufs[i]
      self.log.append(f"into buf{i}")
      v, nv = self.operand()
      t.assign(v)
      box[0] = nv.copy()
      if self.rng.random() < 0.3: t.realize()
      # views of t see the new contents only once it is realized: make sure before one is read
      self.views = [(vw, b, fn) for vw, b, fn in self.views if b is not box] + \
                   [(vw, b, fn) for vw, b, fn in self.views if b is box and self._realized(t)]
    elif what == "assign_view":  # a write through a view into part of a buffer, realized now
      i = self.rng.randrange(len(self.bufs))
      t, box = self.bufs[i]
      self.log.append(f"into buf{i}")
      v, nv = self.operand()
      t[1:, ::2].assign(v[:2, 1:3]).realize()
      t.realize()
      box[0] = box[0].copy()
      box[0][1:, ::2] = nv[:2, 1:3]
    elif what == "setitem":
      t, box = self.rng.choice(self.bufs)
      row, val = self.rng.randrange(3), round(self.rng.uniform(-2, 2), 3)
      t[row] = val
      box[0] = box[0].copy()
      box[0][row] = val
    elif what == "realize":
      pool = [t for t, _ in self.values] + [t for t, _ in self.bufs]
      Tensor.realize(*self.rng.sample(pool, min(len(pool), self.rng.randint(1, 3))))
    else: self.check_one()
    return what

  @staticmethod
  def _realized(t: Tensor) -> bool:
    t.realize()
    return True

  def check_one(self) -> None:
    t, want = self.operand()
    np.testing.assert_allclose(t.numpy(), want, atol=1e-5, rtol=1e-5)

  def check_all(self) -> None:
    for t, box in self.bufs: np.testing.assert_allclose(t.numpy(), box[0], atol=1e-5, rtol=1e-5)
    for t, want in self.values: np.testing.assert_allclose(t.numpy(), want, atol=1e-5, rtol=1e-5)
    for v, box, fn in self.views: np.testing.assert_allclose(v.numpy(), fn(box[0]), atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("seed", range(30))
def test_random_ops_assigns_and_realizes_against_numpy(seed):
  model = Model(random.Random(seed))
  try:
    for _ in range(25): model.step()
    model.check_all()
  except AssertionError as e: raise AssertionError(" ".join(model.log)) from e

def test_contiguous_of_a_write_with_a_reader_of_the_old_value():  # tinygrad's test_assign_diamond_contiguous
  a = Tensor.ones(4).contiguous().realize()
  times_a = a * 3  # reads a before the write
  a.assign(Tensor.full((4,), 2.0))
  np.testing.assert_equal((a.contiguous() + times_a - 1).numpy(), np.full(4, 2.0 + 3.0 - 1.0))  # it read 1, not 2
