"""Movement ops (views: reshape, permute, expand, pad, shrink, flip ...) and the ops built from them (cat, stack,
repeat, split, roll ...), forward and backward against torch on the default device."""
import pytest, torch
import torch.nn.functional as F
import numpy as np
from fusegrad import Tensor, dtypes
from test.helpers import helper_test_op

# *** reshape / view ***
def test_reshape(): helper_test_op([(4, 3, 6)], lambda x: x.reshape(12, 6))
def test_reshape_minus_one(): helper_test_op([(4, 3, 6)], lambda x: x.reshape(-1, 9))
def test_reshape_minus_one_middle(): helper_test_op([(4, 3, 6)], lambda x: x.reshape(2, -1, 3))
def test_reshape_tuple(): helper_test_op([(4, 3, 6)], lambda x: x.reshape((3, 4, 6)))
def test_reshape_to_scalar(): helper_test_op([(1, 1)], lambda x: x.reshape(()))
def test_reshape_from_scalar(): helper_test_op([()], lambda x: x.reshape(1, 1, 1))
def test_reshape_zero_size(): helper_test_op([(0, 4)], lambda x: x.reshape(2, 0, 3), forward_only=True)
def test_view(): helper_test_op([(4, 3, 6)], lambda x: x.view(6, 12))
def test_view_minus_one(): helper_test_op([(4, 3, 6)], lambda x: x.view(-1))
def test_reshape_after_permute(): helper_test_op([(4, 3, 6)], lambda x: x.permute(2, 0, 1).reshape(6, 12) * 2)

def test_reshape_errors():
  x = Tensor.ones(4, 3)
  with pytest.raises(ValueError, match=r"\(4, 3\).*\(5, 2\)"): x.reshape(5, 2)
  with pytest.raises(ValueError, match=r"\(4, 3\)"): x.reshape(-1, 5)
  with pytest.raises(ValueError): x.reshape(-1, -1)
  with pytest.raises(ValueError): x.reshape(-2, -6)
  with pytest.raises(ValueError): Tensor.ones(0, 3).reshape(-1, 0)

# *** permute / transpose / T ***
def test_permute(): helper_test_op([(2, 3, 4, 5)], lambda x: x.permute(3, 1, 0, 2))
def test_permute_tuple(): helper_test_op([(2, 3, 4)], lambda x: x.permute((2, 0, 1)))
def test_permute_negative(): helper_test_op([(2, 3, 4)], lambda x: x.permute(-1, 0, -2))
def test_transpose(): helper_test_op([(2, 3, 4)], lambda x: x.transpose(0, 2))
def test_transpose_negative(): helper_test_op([(2, 3, 4)], lambda x: x.transpose(-1, -2))
def test_transpose_default(): helper_test_op([(3, 4)], lambda x: x.transpose(0, 1), lambda x: x.transpose())
def test_T(): helper_test_op([(3, 4)], lambda x: x.T)
def test_T_3d(): helper_test_op([(2, 3, 4)], lambda x: x.permute(2, 1, 0), lambda x: x.T)

def test_permute_errors():
  x = Tensor.ones(2, 3, 4)
  with pytest.raises(ValueError): x.permute(0, 1)
  with pytest.raises(ValueError): x.permute(0, 0, 1)
  with pytest.raises(IndexError): x.permute(0, 1, 3)

# *** expand ***
def test_expand(): helper_test_op([(4, 1)], lambda x: x.expand(4, 5))
def test_expand_new_axes(): helper_test_op([(3, 1)], lambda x: x.expand(2, 3, 4))
def test_expand_minus_one(): helper_test_op([(3, 1)], lambda x: x.expand(2, -1, 4))
def test_expand_tuple(): helper_test_op([(1, 3)], lambda x: x.expand((4, 3)))
def test_expand_as(): helper_test_op([(1, 3), (2, 3)], lambda x, y: x.expand_as(y) * y)
def test_expand_scalar(): helper_test_op([()], lambda x: x.expand(3, 2))

def test_expand_errors():
  with pytest.raises(ValueError, match=r"\(3, 2\)"): Tensor.ones(3, 2).expand(3, 4)
  with pytest.raises(ValueError): Tensor.ones(3, 2).expand(2)

# *** pad ***
def test_pad_flat(): helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 2)), lambda x: x.pad((1, 2)))
def test_pad_flat_2d(): helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 2, 0, 3)), lambda x: x.pad((1, 2, 0, 3)))
def test_pad_pairs(): helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 2, 3, 0)), lambda x: x.pad(((3, 0), (1, 2))))
def test_pad_pairs_none(): helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 2)), lambda x: x.pad((None, (1, 2))))
def test_pad_value():
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 2, 2, 1), value=-1.5), lambda x: x.pad((1, 2, 2, 1), value=-1.5))
def test_pad_value_inf():
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 1), value=float("-inf")).exp(),
                 lambda x: x.pad((1, 1), value=float("-inf")).exp())
def test_pad_negative(): helper_test_op([(5, 6)], lambda x: torch.nn.functional.pad(x, (-1, 2, 1, -2)), lambda x: x.pad((-1, 2, 1, -2)))
def test_pad_negative_value():
  helper_test_op([(5, 6)], lambda x: torch.nn.functional.pad(x, (-2, 1), value=3.0), lambda x: x.pad((-2, 1), value=3.0))
def test_pad_3d(): helper_test_op([(2, 3, 4)], lambda x: torch.nn.functional.pad(x, (0, 0, 1, 1, 2, 0)), lambda x: x.pad((0, 0, 1, 1, 2, 0)))
def test_pad_value_cast():
  assert Tensor([1, 2]).pad((1, 1), value=1.5).tolist() == [1, 1, 2, 1]  # as torch: the value takes the tensor's dtype
  assert Tensor([True, False]).pad((1, 0), value=True).tolist() == [True, True, False]
def test_pad_int():
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (1, 1), value=7), lambda x: x.pad((1, 1), value=7), dtype=dtypes.int32)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes(mode):
  helper_test_op([(2, 3, 5, 6)], lambda x: torch.nn.functional.pad(x, (2, 1, 1, 3), mode=mode), lambda x: x.pad((2, 1, 1, 3), mode=mode))

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_1d(mode):
  helper_test_op([(2, 3, 5)], lambda x: torch.nn.functional.pad(x, (3, 2), mode=mode), lambda x: x.pad((3, 2), mode=mode))

def test_pad_errors():
  x = Tensor.ones(3, 4)
  with pytest.raises(ValueError): x.pad((1, 2, 3))
  with pytest.raises(ValueError): x.pad((1, 1, 1, 1, 1, 1))
  with pytest.raises(ValueError): x.pad(((1, 1),))
  with pytest.raises(ValueError): x.pad((1, 1), mode="nope")
  with pytest.raises(ValueError): x.pad((4, 0), mode="reflect")

# *** shrink / flip ***
def test_shrink(): helper_test_op([(4, 5)], lambda x: x[1:3, 2:5], lambda x: x.shrink(((1, 3), (2, 5))))
def test_shrink_none(): helper_test_op([(4, 5)], lambda x: x[:, 1:4], lambda x: x.shrink((None, (1, 4))))
def test_shrink_errors():
  with pytest.raises(ValueError): Tensor.ones(4, 5).shrink(((0, 5), None))
  with pytest.raises(ValueError): Tensor.ones(4, 5).shrink(((0, 1),))
def test_flip(): helper_test_op([(3, 4, 5)], lambda x: x.flip(0))
def test_flip_multi(): helper_test_op([(3, 4, 5)], lambda x: x.flip((0, 2)), lambda x: x.flip(0, 2))
def test_flip_negative(): helper_test_op([(3, 4, 5)], lambda x: x.flip(-1))
def test_flip_twice(): helper_test_op([(3, 4)], lambda x: x.flip(1).flip(1) * 2)

# *** flatten / unflatten / squeeze / unsqueeze ***
def test_flatten(): helper_test_op([(2, 3, 4)], lambda x: x.flatten())
def test_flatten_start(): helper_test_op([(2, 3, 4, 5)], lambda x: x.flatten(1))
def test_flatten_range(): helper_test_op([(2, 3, 4, 5)], lambda x: x.flatten(1, 2))
def test_flatten_negative(): helper_test_op([(2, 3, 4, 5)], lambda x: x.flatten(-3, -2))
def test_flatten_scalar(): helper_test_op([()], lambda x: x.flatten())
def test_unflatten(): helper_test_op([(2, 12, 5)], lambda x: x.unflatten(1, (3, 4)))
def test_unflatten_negative(): helper_test_op([(2, 12)], lambda x: x.unflatten(-1, (2, -1)))
def test_squeeze(): helper_test_op([(1, 3, 1, 4)], lambda x: x.squeeze())
def test_squeeze_dim(): helper_test_op([(1, 3, 1, 4)], lambda x: x.squeeze(2))
def test_squeeze_dim_not_one(): helper_test_op([(1, 3, 1, 4)], lambda x: x.squeeze(1))
def test_squeeze_negative(): helper_test_op([(1, 3, 1, 4)], lambda x: x.squeeze(-4))
def test_squeeze_tuple(): helper_test_op([(1, 3, 1, 4)], lambda x: x.squeeze((0, 2)))
def test_squeeze_scalar(): helper_test_op([()], lambda x: x.squeeze(0))
def test_unsqueeze(): helper_test_op([(3, 4)], lambda x: x.unsqueeze(1))
def test_unsqueeze_end(): helper_test_op([(3, 4)], lambda x: x.unsqueeze(2))
def test_unsqueeze_negative(): helper_test_op([(3, 4)], lambda x: x.unsqueeze(-1))
def test_unsqueeze_negative_first(): helper_test_op([(3, 4)], lambda x: x.unsqueeze(-3))
def test_unsqueeze_scalar(): helper_test_op([()], lambda x: x.unsqueeze(0))
def test_squeeze_errors():
  with pytest.raises(IndexError): Tensor.ones(1, 3).squeeze(2)
  with pytest.raises(IndexError): Tensor.ones(1, 3).unsqueeze(3)

# *** cat / stack ***
def test_cat(): helper_test_op([(2, 3), (4, 3)], lambda x, y: torch.cat((x, y)), lambda x, y: x.cat(y))
def test_cat_dim1(): helper_test_op([(2, 3), (2, 1), (2, 4)], lambda x, y, z: torch.cat((x, y, z), 1), lambda x, y, z: Tensor.cat(x, y, z, dim=1))
def test_cat_negative_dim(): helper_test_op([(2, 3, 2), (2, 3, 5)], lambda x, y: torch.cat((x, y), -1), lambda x, y: x.cat(y, dim=-1))
def test_cat_single(): helper_test_op([(2, 3)], lambda x: torch.cat((x,), 0), lambda x: x.cat())
def test_cat_empty_piece(): helper_test_op([(2, 3), (0, 3)], lambda x, y: torch.cat((x, y)), lambda x, y: x.cat(y))
def test_cat_same_tensor(): helper_test_op([(2, 3)], lambda x: torch.cat((x, x * 2, x)), lambda x: x.cat(x * 2, x))
def test_cat_int():
  helper_test_op([(2, 3), (2, 2)], lambda x, y: torch.cat((x, y), 1), lambda x, y: x.cat(y, dim=1), dtype=dtypes.int32)
def test_cat_stack_list():
  a, b = Tensor([[1, 2]]), Tensor([[3, 4]])
  assert Tensor.cat([a, b]).tolist() == [[1, 2], [3, 4]] and Tensor.cat((a, b), dim=1).tolist() == [[1, 2, 3, 4]]
  assert Tensor.stack([a, b], dim=1).tolist() == [[[1, 2], [3, 4]]] and Tensor.stack((a,)).shape == (1, 1, 2)
def test_cat_promotes():
  r = Tensor([1, 2]).cat(Tensor([1.5]))
  assert r.dtype == dtypes.float32 and r.tolist() == [1.0, 2.0, 1.5]
  assert Tensor([True]).cat(Tensor([False, True])).tolist() == [True, False, True]
def test_cat_errors():
  with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"): Tensor.ones(2, 3).cat(Tensor.ones(2, 4))
  with pytest.raises(ValueError): Tensor.ones(2, 3).cat(Tensor.ones(3))
def test_stack(): helper_test_op([(2, 3), (2, 3), (2, 3)], lambda x, y, z: torch.stack((x, y, z)), lambda x, y, z: Tensor.stack(x, y, z))
def test_stack_dim(): helper_test_op([(2, 3), (2, 3)], lambda x, y: torch.stack((x, y), 1), lambda x, y: x.stack(y, dim=1))
def test_stack_last(): helper_test_op([(2, 3), (2, 3)], lambda x, y: torch.stack((x, y), -1), lambda x, y: x.stack(y, dim=-1))
def test_stack_scalars(): helper_test_op([(), ()], lambda x, y: torch.stack((x, y)), lambda x, y: x.stack(y))
def test_stack_errors():
  with pytest.raises(ValueError): Tensor.ones(2, 3).stack(Tensor.ones(3, 2))

# *** repeat / repeat_interleave ***
def test_repeat(): helper_test_op([(2, 3)], lambda x: x.repeat(2, 3))
def test_repeat_new_dims(): helper_test_op([(2, 3)], lambda x: x.repeat(2, 1, 2))
def test_repeat_tuple(): helper_test_op([(2, 3)], lambda x: x.repeat((1, 3)))
def test_repeat_zero(): helper_test_op([(2, 3)], lambda x: x.repeat(0, 2), forward_only=True)
def test_repeat_errors():
  with pytest.raises(ValueError): Tensor.ones(2, 3).repeat(2)
def test_repeat_interleave(): helper_test_op([(2, 3)], lambda x: x.repeat_interleave(2))
def test_repeat_interleave_dim(): helper_test_op([(2, 3)], lambda x: x.repeat_interleave(3, dim=1))
def test_repeat_interleave_dim0(): helper_test_op([(2, 3)], lambda x: x.repeat_interleave(2, 0))
def test_repeat_interleave_negative(): helper_test_op([(2, 3, 2)], lambda x: x.repeat_interleave(2, dim=-2))
def test_repeat_interleave_negative_count_raises_as_torch():
  with pytest.raises(RuntimeError): torch.tensor([1., 2.]).repeat_interleave(-1)
  with pytest.raises(RuntimeError, match="non-negative"): Tensor([1., 2.]).repeat_interleave(-1)

# *** split / chunk / unbind ***
def test_unbind_of_an_empty_axis_is_empty_as_torch():
  assert Tensor.zeros(0, 4).unbind(0) == () and torch.zeros(0, 4).unbind(0) == ()
  assert len(Tensor.zeros(4, 0).unbind(0)) == 4
def test_split(): helper_test_op([(7, 3)], lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.split(3))]),
                                 lambda x: Tensor.cat(*[p * (i + 1) for i, p in enumerate(x.split(3))]))
def test_split_sizes(): helper_test_op([(3, 7)], lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.split([2, 0, 5], 1))], 1),
                                       lambda x: Tensor.cat(*[p * (i + 1) for i, p in enumerate(x.split([2, 0, 5], 1))], dim=1))
def test_split_shapes():
  x, xt = Tensor.ones(7, 3), torch.ones(7, 3)
  for args in [(3,), (7,), (10,), ([1, 6],), (2, 1), (1, -1)]:
    assert [p.shape for p in x.split(*args)] == [tuple(p.shape) for p in xt.split(*args)], args
def test_split_errors():
  with pytest.raises(ValueError): Tensor.ones(7, 3).split([2, 2])
  with pytest.raises(ValueError): Tensor.ones(7, 3).split(0)
def test_chunk_shapes():
  for n, c in [(7, 3), (6, 3), (6, 4), (5, 5), (5, 7), (1, 2), (0, 2)]:
    x, xt = Tensor.ones(n, 2), torch.ones(n, 2)
    assert [p.shape for p in x.chunk(c)] == [tuple(p.shape) for p in xt.chunk(c)], (n, c)
def test_chunk(): helper_test_op([(3, 8)], lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.chunk(3, 1))], 1),
                                 lambda x: Tensor.cat(*[p * (i + 1) for i, p in enumerate(x.chunk(3, 1))], dim=1))
def test_unbind(): helper_test_op([(3, 4)], lambda x: torch.stack([p * (i + 1) for i, p in enumerate(x.unbind())]),
                                  lambda x: Tensor.stack(*[p * (i + 1) for i, p in enumerate(x.unbind())]))
def test_unbind_dim(): helper_test_op([(3, 4, 2)], lambda x: torch.stack([p * (i + 1) for i, p in enumerate(x.unbind(-2))], 0),
                                      lambda x: Tensor.stack(*[p * (i + 1) for i, p in enumerate(x.unbind(-2))], dim=0))
def test_unbind_len():
  assert len(Tensor.ones(3, 4).unbind(1)) == 4 and Tensor.ones(3, 4).unbind(1)[0].shape == (3,)

# *** roll ***
def test_roll(): helper_test_op([(5, 4)], lambda x: x.roll(2, 0))
def test_roll_negative(): helper_test_op([(5, 4)], lambda x: x.roll(-1, 1))
def test_roll_large(): helper_test_op([(5, 4)], lambda x: x.roll(13, 0))
def test_roll_multi(): helper_test_op([(5, 4, 3)], lambda x: x.roll((1, -2), (0, 2)))
def test_roll_flat(): helper_test_op([(5, 4)], lambda x: x.roll(3))
def test_roll_negative_dim(): helper_test_op([(5, 4)], lambda x: x.roll(1, -1))

# *** chains of views ***
def test_view_chain(): helper_test_op([(4, 6)], lambda x: x.reshape(2, 2, 6).permute(2, 0, 1).flip(1)[1:5].expand(2, 4, 2, 2).sum(0))
def test_pad_then_shrink(): helper_test_op([(4, 6)], lambda x: torch.nn.functional.pad(x, (2, 2, 1, 1))[1:5, 1:7],
                                           lambda x: x.pad((2, 2, 1, 1)).shrink(((1, 5), (1, 7))))

# *** rearrange (einops notation), against the same reshape/permute written out in torch ***
REARRANGE_CASES = [
  ((2, 3, 4, 5), "b c h w -> b (h w) c", {}, lambda x: x.permute(0, 2, 3, 1).reshape(2, 20, 3)),
  ((2, 20, 3), "b (h w) c -> b c h w", {"h": 4}, lambda x: x.reshape(2, 4, 5, 3).permute(0, 3, 1, 2)),
  ((2, 20, 3), "b (h w) c -> b c h w", {"w": 5}, lambda x: x.reshape(2, 4, 5, 3).permute(0, 3, 1, 2)),
  ((2, 20, 3), "b (h w) c -> b c h w", {"h": 4, "w": 5}, lambda x: x.reshape(2, 4, 5, 3).permute(0, 3, 1, 2)),
  ((3, 4), "h w -> w h", {}, lambda x: x.T),
  ((3, 4), "h w -> h w", {}, lambda x: x * 1),
  ((3, 4), "h w->(w h)", {}, lambda x: x.T.reshape(12)),
  ((2, 3, 4), "a b c -> c a b", {}, lambda x: x.permute(2, 0, 1)),
  ((2, 3, 4), "a b c -> (a b c)", {}, lambda x: x.reshape(24)),
  ((2, 3, 4), "a b c -> (c b a)", {}, lambda x: x.permute(2, 1, 0).reshape(24)),
  ((24,), "(a b c) -> c b a", {"a": 2, "b": 3}, lambda x: x.reshape(2, 3, 4).permute(2, 1, 0)),
  ((2, 6, 4), "b (c p1) (h p2) -> b (p1 p2) c h", {"p1": 2, "p2": 2},
   lambda x: x.reshape(2, 3, 2, 2, 2).permute(0, 2, 4, 1, 3).reshape(2, 4, 3, 2)),
  ((2, 3, 4), "b c h -> b 1 c h ()", {}, lambda x: x.reshape(2, 1, 3, 4, 1)),
  ((2, 1, 4), "b 1 h -> h b", {}, lambda x: x.reshape(2, 4).T),
  ((2, 1, 4), "b () h -> (h b)", {}, lambda x: x.reshape(2, 4).T.reshape(8)),
  ((2, 3, 4), "b c (h 1) -> (b 1) (c) h", {}, lambda x: x * 1),
  ((2, 3, 4), "b c h -> (b c) () h", {}, lambda x: x.reshape(6, 1, 4)),
  ((3, 4), "h w -> (h w) 1 1", {}, lambda x: x.reshape(12, 1, 1)),
  ((2, 3), "my_axis axis2 -> axis2 my_axis", {}, lambda x: x.T),
  ((), " -> 1", {}, lambda x: x.reshape(1)),
  ((1,), "1 -> ", {}, lambda x: x.reshape(())),
  ((0, 3), "a b -> b a", {}, lambda x: x.T),
  # "..." stands for the axes not named
  ((2, 3, 4, 5), "b ... -> b (...)", {}, lambda x: x.reshape(2, 60)),
  ((2, 3, 4, 5), "b ... w -> w ... b", {}, lambda x: x.permute(3, 1, 2, 0)),
  ((2, 3, 4, 5), "... h w -> ... (w h)", {}, lambda x: x.transpose(-1, -2).reshape(2, 3, 20)),
  ((2, 3, 4, 5), "... -> (...)", {}, lambda x: x.reshape(120)),
  ((2, 3), "a b ... -> b ... a", {}, lambda x: x.T),
  ((2, 12), "b ... (h w) -> b ... w h", {"h": 3}, lambda x: x.reshape(2, 3, 4).permute(0, 2, 1)),
  ((2, 3, 4), "... -> 1 ...", {}, lambda x: x.reshape(1, 2, 3, 4)),
]

@pytest.mark.parametrize("shape,formula,sizes,torch_fxn", REARRANGE_CASES, ids=[c[1] for c in REARRANGE_CASES])
def test_rearrange(shape, formula, sizes, torch_fxn):
  helper_test_op([shape], torch_fxn, lambda x: x.rearrange(formula, **sizes), forward_only=0 in shape)

def test_rearrange_round_trip():
  x = Tensor(np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6))
  y = x.rearrange("b c h (w p) -> b (p c) h w", p=2)
  assert y.shape == (2, 6, 4, 3)
  np.testing.assert_array_equal(y.rearrange("b (p c) h w -> b c h (w p)", p=2).numpy(), x.numpy())

def test_rearrange_int_and_chain():
  helper_test_op([(4, 6)], lambda x: x.reshape(2, 2, 3, 2).permute(1, 3, 0, 2).reshape(4, 6), dtype=dtypes.int32,
                 fg_fxn=lambda x: x.rearrange("(a b) (c d) -> (b d) (a c)", a=2, d=2), forward_only=True)
  helper_test_op([(4, 6)], lambda x: (x.T.reshape(24) * 2).reshape(6, 4).exp(),
                 lambda x: (x.rearrange("h w -> (w h)") * 2).rearrange("(w h) -> w h", h=4).exp())

@pytest.mark.parametrize("formula,sizes,match", [
  ("b c h w -> b c h", {}, r"w only on the left"),
  ("b c h w -> b c h w x", {}, r"x only on the right"),
  ("b c h w -> b c h x", {}, r"w only on the left side; x only on the right"),
  ("b c h w -> b c (h w) w", {}, r"duplicate axis name\(s\) w on the right"),
  ("b b h w -> b h w", {}, r"duplicate axis name\(s\) b on the left"),
  ("b c h -> b c h", {}, r"left side has 3 axes.*\(2, 3, 4, 6\)"),
  ("b c h w x -> b c h w x", {}, r"left side has 5 axes"),
  ("b c h (w k) -> b c h w k", {"k": 4}, r"\(w k\) of size 6.*can't be split"),
  ("b c h (w k) -> b c h w k", {}, r"all but one of axis \(w k\)"),
  ("b c h w -> b c h w", {"h": 5}, r"\(h\) of size 4.*multiply to 5"),
  ("b c h (w k) -> b c h w k", {"w": 2, "k": 2}, r"multiply to 4"),
  ("b c h w -> b c h w", {"q": 2}, r"unknown axis 'q'"),
  ("b c h w -> b c h w", {"h": -4}, r"size of 'h'"),
  ("b c h w", {}, r"one '->'"),
  ("b c -> h w -> b c", {}, r"one '->'"),
  ("b c h w -> b c (h (w))", {}, r"nested parentheses"),
  ("b c h w -> b c (h w", {}, r"unmatched '\('"),
  ("b c h w) -> b c h w", {}, r"unmatched '\)'"),
  ("b c 4 w -> b c w", {}, r"only 1 may be a number"),
  ("b c h w -> b c h w-1", {}, r"'w-1' is not a valid axis name"),
  ("b 1 h w -> b h w", {}, r"unit axis '1' has size 3"),
  ("b (c ...) -> b c", {}, r"'\.\.\.' can't be inside parentheses"),
  ("b ... -> b", {}, r"\.\.\. only on the left"),
  ("b c h w -> b c ... h w", {}, r"\.\.\. only on the right"),
  ("a b c d e ... -> a b c d e ...", {}, r"left side has 6 axes"),
])
def test_rearrange_errors(formula, sizes, match):
  x = Tensor.ones(2, 3, 4, 6)
  with pytest.raises(ValueError, match=match) as e: x.rearrange(formula, **sizes)
  assert formula in str(e.value), "the error should quote the formula"

# *** pad_to / shrink_to ***
def test_pad_to(): helper_test_op([(2, 3)], lambda x: F.pad(x, (0, 2, 0, 1)), lambda x: x.pad_to(3, 5))
def test_pad_to_none_value():
  helper_test_op([(2, 3)], lambda x: F.pad(x, (0, 0, 0, 2), value=-1.5), lambda x: x.pad_to((4, None), value=-1.5))
def test_shrink_to(): helper_test_op([(4, 5)], lambda x: x[:2, :3], lambda x: x.shrink_to(2, 3))
def test_shrink_to_none(): helper_test_op([(4, 5, 2)], lambda x: x[:, :1], lambda x: x.shrink_to([None, 1, None]))
def test_pad_shrink_to_same_and_int():
  assert Tensor([1, 2]).pad_to(4).tolist() == [1, 2, 0, 0] and Tensor([1, 2]).pad_to(2).tolist() == [1, 2]
  assert Tensor([[1, 2, 3]]).shrink_to(1, 0).shape == (1, 0)
def test_pad_shrink_to_errors():
  x = Tensor.ones(2, 3)
  with pytest.raises(ValueError, match=r"pad_to.*\(2, 3\).*\(2, 2\)"): x.pad_to(2, 2)
  with pytest.raises(ValueError, match=r"shrink_to.*\(2, 3\).*\(3, 3\)"): x.shrink_to(3, 3)
  with pytest.raises(ValueError, match="pad_to"): x.pad_to(4)
  with pytest.raises(ValueError, match="shrink_to"): x.shrink_to(1, 1, 1)
  with pytest.raises(ValueError, match="pad_to"): x.pad_to(4, -1)

# *** diagonal / diag ***
@pytest.mark.parametrize("offset", [0, 1, 2, -1, -3, 7, -7])
@pytest.mark.parametrize("dims", [(0, 1), (1, 2), (2, 0), (-1, -2)])
def test_diagonal(offset, dims): helper_test_op([(3, 4, 5)], lambda x: x.diagonal(offset, *dims))
def test_diagonal_defaults(): helper_test_op([(4, 3)], lambda x: x.diagonal())
def test_diagonal_tall_and_4d():
  helper_test_op([(6, 2)], lambda x: x.diagonal(-1))
  helper_test_op([(2, 3, 3, 2)], lambda x: x.diagonal(0, 1, 3) * 2)
def test_diagonal_errors():
  with pytest.raises(ValueError, match="diagonal"): Tensor.ones(3, 3).diagonal(0, 1, 1)
  with pytest.raises(IndexError): Tensor.ones(3).diagonal()
@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diag_vector(offset): helper_test_op([(4,)], lambda x: torch.diag(x, offset), lambda x: x.diag(offset))
@pytest.mark.parametrize("offset", [0, 2, -1])
def test_diag_matrix(offset): helper_test_op([(3, 5)], lambda x: torch.diag(x, offset), lambda x: x.diag(offset))
def test_diag_int_and_errors():
  assert Tensor([1, 2]).diag().tolist() == [[1, 0], [0, 2]] and Tensor([1, 2]).diag().dtype == dtypes.int32
  assert Tensor.ones(0).diag().shape == (0, 0)
  with pytest.raises(ValueError, match=r"diag.*\(2, 2, 2\).*diagonal"): Tensor.ones(2, 2, 2).diag()
  with pytest.raises(ValueError, match="diag"): Tensor(1.0).diag()

# *** meshgrid ***
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing):
  for i in range(3):
    helper_test_op([(2,), (3,), (4,)], lambda x, y, z: torch.meshgrid(x, y, z, indexing=indexing)[i] * (i + 1),
                   lambda x, y, z: x.meshgrid(y, z, indexing=indexing)[i] * (i + 1))
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_two_and_one(indexing):
  xs, ys = Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]), indexing=indexing)
  want = torch.meshgrid(torch.tensor([1, 2]), torch.tensor([3, 4, 5]), indexing=indexing)
  np.testing.assert_equal(xs.numpy(), want[0].numpy())
  np.testing.assert_equal(ys.numpy(), want[1].numpy())
  (only,) = Tensor([1, 2, 3]).meshgrid(indexing=indexing)
  assert only.tolist() == [1, 2, 3]
  assert [g.shape for g in Tensor.meshgrid(Tensor(1.0), Tensor([1.0, 2.0]), indexing=indexing)] == \
    [tuple(g.shape) for g in torch.meshgrid(torch.tensor(1.0), torch.tensor([1.0, 2.0]), indexing=indexing)]
def test_meshgrid_list():
  xs, ys = Tensor.meshgrid([Tensor([1, 2]), Tensor([3, 4, 5])], indexing="xy")
  assert xs.tolist() == [[1, 2]] * 3 and ys.tolist() == [[3, 3], [4, 4], [5, 5]]
def test_meshgrid_errors():
  with pytest.raises(ValueError, match="meshgrid"): Tensor.meshgrid([])
  with pytest.raises(ValueError, match="meshgrid.*'ji'"): Tensor([1, 2]).meshgrid(Tensor([1]), indexing="ji")
  with pytest.raises(ValueError, match=r"meshgrid.*\(2, 2\)"): Tensor.ones(2, 2).meshgrid(Tensor([1]))

# *** conformance: dims out of range raise IndexError as in torch; shape errors are RuntimeErrors too ***
@pytest.mark.parametrize("name,fn", [
  ("cumsum", lambda m, x: x.cumsum(5)), ("cumprod", lambda m, x: x.cumprod(-6)), ("flip", lambda m, x: x.flip(5)),
  ("cummax", lambda m, x: x.cummax(5)), ("cummin", lambda m, x: x.cummin(5)), ("roll", lambda m, x: x.roll(1, 5)),
  ("squeeze", lambda m, x: x.squeeze(5)), ("stack", lambda m, x: m.stack([x, x], 6)), ("transpose", lambda m, x: x.transpose(0, 5)),
  ("softmax", lambda m, x: x.softmax(5)), ("sum", lambda m, x: x.sum(5))])
def test_dim_out_of_range_raises_like_torch(name, fn):
  with pytest.raises(IndexError): fn(torch, torch.ones(2, 3))
  with pytest.raises(IndexError): fn(Tensor, Tensor.ones(2, 3))

@pytest.mark.parametrize("fn", [lambda m: m.ones(3) + m.ones(2), lambda m: m.ones(2, 3) * m.ones(3, 2),
                                lambda m: m.ones(3).reshape(2), lambda m: m.ones(2, 3).expand(3, 3),
                                lambda m: m.cat([m.ones(2, 3), m.ones(2, 4)]), lambda m: m.stack([m.ones(2), m.ones(3)])])
def test_shape_errors_are_runtime_and_value_errors(fn):
  with pytest.raises(RuntimeError): fn(torch)
  with pytest.raises(RuntimeError): fn(Tensor)
  with pytest.raises(ValueError): fn(Tensor)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(-1, 1, 1, -1), (-1, -1, 0, 0), (1, -2, -1, 1), (0, 0, -1, -1), (2, -1, -1, 2)])
def test_pad_negative_modes(mode, pad):  # negative pads cut, in torch's order (before the wrap for circular)
  helper_test_op([(1, 2, 3, 4)], lambda x: F.pad(x, pad, mode=mode), lambda x: x.pad(pad, mode=mode))
