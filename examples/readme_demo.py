"""The README's examples, runnable: autograd through a matmul, and one fused kernel for a matmul written as a reduce."""
from fusegrad import Tensor, GlobalCounters

x = Tensor.eye(3).clone()
x.requires_grad = True
y = Tensor([[2.0, 0, -2.0]], requires_grad=True)
z = y.matmul(x).sum()
z.backward()
print("x.grad", x.grad.tolist())  # [[2, 2, 2], [0, 0, 0], [-2, -2, -2]]
print("y.grad", y.grad.tolist())  # [[1, 1, 1]]

N = 256
a, b = Tensor.rand(N, N).realize(), Tensor.rand(N, N).realize()
GlobalCounters.reset()
c = (a.reshape(N, 1, N) * b.T.reshape(1, N, N)).sum(axis=2).realize()
print(f"matmul as multiply-and-sum: {GlobalCounters.kernel_count} kernel, max error vs numpy "
      f"{abs(c.numpy() - a.numpy() @ b.numpy()).max():.2e}")
