"""The example models against the reference implementations in transformers (PyTorch, CPU, float32)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fusegrad import Tensor, dtypes
from examples.gpt2 import Generator, load_gpt2

DECODE_STEPS = 20

def hf_logits(model, ids: list[int]) -> np.ndarray:
  with torch.no_grad(): return model(torch.tensor([ids])).logits[0].numpy()

def hf_greedy(model, prompt: list[int], count: int) -> list[int]:
  with torch.no_grad():
    ids = torch.tensor([prompt])  # an explicit mask: generate would take token 0 (the pad id) for padding
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=count, do_sample=False,
                         pad_token_id=0)
  return out[0, len(prompt):].tolist()

def check_cached_decoding(net, ref, prompt: list[int], max_context: int, atol: float) -> None:
  """Logits of the prompt (all positions) and of DECODE_STEPS cached steps, then greedy tokens, against ref."""
  want = hf_logits(ref, prompt)
  got = net(Tensor([prompt], dtype=dtypes.int32), 0, last_only=False).numpy()[0]
  np.testing.assert_allclose(got, want, atol=atol, rtol=0)
  gen = Generator(net, max_context)
  rng = np.random.default_rng(1)
  ids = list(prompt) + rng.integers(0, want.shape[-1], DECODE_STEPS).tolist()  # teacher-forced tokens
  want = hf_logits(ref, ids)
  gen.prefill(prompt)
  for pos in range(len(prompt), len(ids)):
    np.testing.assert_allclose(gen.decode(ids[pos], pos), want[pos], atol=atol, rtol=0, err_msg=f"position {pos}")
  assert len(gen.step.jit_cache) > 0  # the steps replayed one capture
  assert list(Generator(net, max_context).generate(prompt, DECODE_STEPS)) == hf_greedy(ref, prompt, DECODE_STEPS)

# *** GPT-2 ***

@pytest.fixture(scope="module")
def tiny_hf_gpt2(tmp_path_factory):
  torch.manual_seed(0)
  cfg = transformers.GPT2Config(vocab_size=96, n_positions=48, n_embd=32, n_layer=2, n_head=4, initializer_range=0.2,
                                bos_token_id=0, eos_token_id=None)
  model = transformers.GPT2LMHeadModel(cfg).eval()
  path = tmp_path_factory.mktemp("gpt2")
  model.save_pretrained(path, safe_serialization=True)
  return model, path

def test_gpt2_matches_transformers(tiny_hf_gpt2):
  ref, path = tiny_hf_gpt2
  net, tok = load_gpt2(str(path), max_context=40)
  assert tok is None
  check_cached_decoding(net, ref, [5, 17, 3, 80, 41, 9, 0], 40, atol=1e-4)

def test_gpt2_errors(tiny_hf_gpt2, tmp_path):
  net, _ = load_gpt2(str(tiny_hf_gpt2[1]), max_context=8)
  gen = Generator(net, 8)
  with pytest.raises(ValueError, match="max_context"): gen.prefill(list(range(9)))
  with pytest.raises(ValueError, match="past max_context"): gen.decode(1, 8)
  with pytest.raises(ValueError, match="neither a directory"): load_gpt2(str(tmp_path / "nothing"))
