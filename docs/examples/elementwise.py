# The examples of docs/tensor/elementwise.md. Each `# %% NAME` cell is shown under NAME's API entry and runs when the
# site is built, after these lines (run, not shown: docs/hooks.py); test/test_docs.py checks that every op has one.
from fusegrad import Tensor, dtypes
import numpy as np
np.set_printoptions(precision=4, suppress=True)

# %% add
x = Tensor([1, 2, 3])
print(x.add(10).tolist(), (x + Tensor([[0], [100]])).tolist())

# %% sub
print(Tensor([5, 7]).sub(2).tolist(), Tensor([5, 7]).sub(2, reverse=True).tolist())

# %% mul
print(Tensor([1.5, 2.0]).mul(Tensor([2.0, -1.0])).tolist(), (Tensor([1, 2]) * 3).tolist())

# %% div
x = Tensor([7, -7])
print(x.div(2).tolist(), x.div(2, rounding_mode="trunc").tolist(), x.div(2, rounding_mode="floor").tolist())

# %% floordiv
print(Tensor([7, -7]).floordiv(2).tolist(), (Tensor([7.5, -7.5]) // 2).tolist())

# %% idiv
print(Tensor([7, -7]).idiv(2).tolist())

# %% mod
print(Tensor([7, -7]).mod(3).tolist(), (Tensor([7.5, -7.5]) % 2).tolist())

# %% fmod
print(Tensor([7, -7]).fmod(3).tolist())

# %% neg
print(Tensor([1.0, -2.0]).neg().tolist(), Tensor([True, False]).neg().tolist())

# %% reciprocal
print(Tensor([2, 4, -8]).reciprocal().tolist())

# %% pow
print(Tensor([-2.0, 3.0]).pow(2).tolist(), Tensor([1.0, 2.0, 3.0]).pow(2, reverse=True).tolist())

# %% maximum
print(Tensor([1.0, 5.0, float("nan")]).maximum(Tensor([3.0, 2.0, 0.0])).tolist())

# %% minimum
print(Tensor([1.0, 5.0, 4.0]).minimum(3).tolist())

# %% where
a = Tensor([-1.0, 2.0, -3.0])
print((a > 0).where(a, 0).tolist(), Tensor([True, False]).where(1, Tensor([[5], [6]])).tolist())

# %% masked_fill
x = Tensor([-1.0, 2.0, -3.0])
print(x.masked_fill(x < 0, 0).tolist())

# %% clip
x = Tensor([-2.0, 0.5, 3.0, float("nan")])
print(x.clip(-1, 1).tolist(), x.clip(max=0).tolist())

# %% clamp
print(Tensor([-2, 0, 3]).clamp(0, 2).tolist())

# %% abs
print(Tensor([-2.0, -0.0, 3.0]).abs().tolist())

# %% sign
print(Tensor([-2.0, 0.0, 3.0, float("nan")]).sign().tolist(), Tensor([-5, 7]).sign().tolist())

# %% copysign
print(Tensor([1.0, 2.0, 3.0]).copysign(Tensor([-1.0, 0.0, -0.0])).tolist())

# %% square
print(Tensor([-3, 2]).square().tolist())

# %% lerp
print(Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.25).tolist())

# %% logaddexp
print(Tensor([0.0, 1000.0]).logaddexp(Tensor([0.0, 1000.0])).numpy())

# %% sqrt
print(Tensor([4.0, 2.0, -1.0]).sqrt().numpy())

# %% rsqrt
print(Tensor([4.0, 16.0]).rsqrt().tolist())

# %% expm1
print(Tensor([0.0, 1e-5, 1.0]).expm1().numpy())

# %% log2
print(Tensor([1.0, 8.0, 0.5]).log2().tolist())

# %% log10
print(Tensor([1.0, 1000.0, 0.1]).log10().numpy())

# %% log1p
print(Tensor([0.0, 1e-5, 1.0]).log1p().numpy())

# %% sin
print(Tensor([0.0, np.pi / 6, np.pi / 2]).sin().numpy())

# %% cos
print(Tensor([0.0, np.pi / 3, np.pi]).cos().numpy())

# %% tan
print(Tensor([0.0, np.pi / 4]).tan().numpy())

# %% sinh
print(Tensor([0.0, 1.0]).sinh().numpy())

# %% cosh
print(Tensor([0.0, 1.0]).cosh().numpy())

# %% tanh
print(Tensor([-2.0, 0.0, 0.5]).tanh().numpy())

# %% asinh
print(Tensor([-1.0, 0.0, 1.0]).asinh().numpy())

# %% acosh
print(Tensor([1.0, 2.0, 0.5]).acosh().numpy())

# %% atanh
print(Tensor([-0.5, 0.0, 0.5]).atanh().numpy())

# %% atan
print(Tensor([-1.0, 0.0, 1.0]).atan().numpy())

# %% asin
print(Tensor([-1.0, 0.5, 2.0]).asin().numpy())

# %% acos
print(Tensor([1.0, 0.0, -1.0]).acos().numpy())

# %% erf
print(Tensor([-1.0, 0.0, 0.5, 3.0]).erf().numpy())

# %% trunc
print(Tensor([-1.7, 1.7]).trunc().tolist())

# %% floor
print(Tensor([-1.5, 1.5]).floor().tolist())

# %% ceil
print(Tensor([-1.5, 1.5]).ceil().tolist())

# %% round
print(Tensor([0.5, 1.5, 2.5, -0.6]).round().tolist())

# %% frac
print(Tensor([2.25, -1.75]).frac().tolist())

# %% ne
print(Tensor([1.0, 2.0, float("nan")]).ne(Tensor([1.0, 3.0, float("nan")])).tolist())

# %% eq
print(Tensor([1.0, 2.0, float("nan")]).eq(Tensor([1.0, 3.0, float("nan")])).tolist())

# %% lt
print(Tensor([1, 2, 3]).lt(2).tolist())

# %% le
print(Tensor([1, 2, 3]).le(2).tolist())

# %% ge
print(Tensor([1, 2, 3]).ge(2).tolist())

# %% isnan
print(Tensor([1.0, float("nan"), float("inf")]).isnan().tolist())

# %% isinf
x = Tensor([1.0, float("inf"), -float("inf")])
print(x.isinf().tolist(), x.isinf(detect_negative=False).tolist())

# %% isclose
print(Tensor([1.0, 1.001, float("nan")]).isclose(Tensor([1.0, 1.0, float("nan")]), equal_nan=True).tolist())

# %% allclose
print(Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-6])), Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.1])))

# %% isfinite
print(Tensor([1.0, float("inf"), float("nan")]).isfinite().tolist())

# %% logical_not
print(Tensor([0, 3]).logical_not().tolist())

# %% logical_and
print(Tensor([True, True, False]).logical_and(Tensor([True, False, False])).tolist())

# %% logical_or
print(Tensor([True, True, False]).logical_or(Tensor([True, False, False])).tolist())

# %% logical_xor
print(Tensor([True, True, False]).logical_xor(Tensor([True, False, False])).tolist())

# %% bitwise_and
print(Tensor([0b1100, 0b1010]).bitwise_and(0b0110).tolist())

# %% bitwise_or
print(Tensor([0b1100, 0b1010]).bitwise_or(0b0110).tolist())

# %% bitwise_xor
print(Tensor([0b1100, 0b1010]).bitwise_xor(0b0110).tolist())

# %% xor
print(Tensor([5, 3]).xor(Tensor([1, 1])).tolist())

# %% bitwise_not
print(Tensor([0, 5, -1]).bitwise_not().tolist(), Tensor([True, False]).bitwise_not().tolist())

# %% lshift
print(Tensor([1, 3]).lshift(2).tolist(), Tensor([1], dtype=dtypes.uint8).lshift(8).tolist())

# %% rshift
print(Tensor([16, -16]).rshift(2).tolist())

# %% relu6
print(Tensor([-1.0, 3.0, 8.0]).relu6().tolist())

# %% leaky_relu
print(Tensor([-2.0, 3.0]).leaky_relu(0.1).numpy())

# %% sigmoid
print(Tensor([-100.0, 0.0, 2.0]).sigmoid().numpy())

# %% logsigmoid
print(Tensor([-100.0, 0.0, 2.0]).logsigmoid().numpy())

# %% hardsigmoid
print(Tensor([-4.0, 0.0, 1.5, 4.0]).hardsigmoid().numpy())

# %% hardtanh
print(Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist())

# %% gelu
x = Tensor([-1.0, 0.0, 1.0])
print(x.gelu().numpy(), x.gelu(approximate="none").numpy())

# %% quick_gelu
print(Tensor([-1.0, 0.0, 1.0]).quick_gelu().numpy())

# %% silu
print(Tensor([-1.0, 0.0, 1.0]).silu().numpy())

# %% swish
print(Tensor([-1.0, 0.0, 1.0]).swish().numpy())

# %% elu
print(Tensor([-2.0, 0.0, 2.0]).elu().numpy())

# %% celu
print(Tensor([-2.0, 0.0, 2.0]).celu(alpha=2.0).numpy())

# %% selu
print(Tensor([-2.0, 0.0, 2.0]).selu().numpy())

# %% softplus
print(Tensor([-2.0, 0.0, 30.0]).softplus().numpy())

# %% mish
print(Tensor([-2.0, 0.0, 2.0]).mish().numpy())

# %% hardswish
print(Tensor([-4.0, -1.0, 0.0, 4.0]).hardswish().numpy())

# %% softsign
print(Tensor([-3.0, 0.0, 1.0]).softsign().numpy())
