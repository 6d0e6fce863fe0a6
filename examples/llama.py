"""A LLaMA-family decoder (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention) with a KV cache.

  PYTHONPATH=. python examples/llama.py --tiny                               # a random tiny model, runs anywhere
  PYTHONPATH=. python examples/llama.py --model path/to/hf_dir --prompt "Hi" # config.json, model.safetensors(.index)
  PYTHONPATH=. python examples/llama.py --model model.gguf                   # F32/F16/Q8_0/Q4_0/... GGUF weights
  PYTHONPATH=. python examples/llama.py --model https://.../model.gguf       # fetched once into the cache

Generation is examples/gpt2.py's: the prompt in one call, then one token per call under TinyJit with the position
as a bound Variable, the cache a fixed-size buffer."""
from __future__ import annotations
import argparse, json, pathlib
from dataclasses import dataclass
from typing import Any
from fusegrad import Tensor, fetch, dtypes
from fusegrad.nn import Embedding, Linear, RMSNorm
from fusegrad.nn.state import safe_load, load_state_dict, gguf_load
from examples.gpt2 import KVCache, Generator, Pos, causal_mask, run_generation, text_codec

@dataclass(frozen=True)
class LlamaConfig:
  vocab_size: int = 32000
  hidden_size: int = 4096
  intermediate_size: int = 11008
  num_hidden_layers: int = 32
  num_attention_heads: int = 32
  num_key_value_heads: int = 32
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  max_position_embeddings: int = 2048
  tie_word_embeddings: bool = False
  head_dim: int = 0  # 0: hidden_size // num_attention_heads

  @property
  def dim_per_head(self) -> int: return self.head_dim or self.hidden_size // self.num_attention_heads

  @staticmethod
  def from_hf(cfg: dict[str, Any]) -> LlamaConfig:
    cfg = {**cfg, "rope_theta": cfg.get("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))}
    cfg.setdefault("num_key_value_heads", cfg.get("num_attention_heads"))
    return LlamaConfig(**{k: cfg[k] for k in LlamaConfig.__dataclass_fields__ if cfg.get(k) is not None})

  @staticmethod
  def from_gguf(kv: dict[str, Any], vocab_size: int, tied: bool) -> LlamaConfig:
    arch = kv.get("general.architecture", "llama")
    def get(key: str, default: Any = None) -> Any:
      if f"{arch}.{key}" not in kv and default is None: raise ValueError(f"llama: the GGUF file has no {arch}.{key}")
      return kv.get(f"{arch}.{key}", default)
    heads = get("attention.head_count")
    return LlamaConfig(vocab_size, get("embedding_length"), get("feed_forward_length"), get("block_count"), heads,
                       get("attention.head_count_kv", heads), get("attention.layer_norm_rms_epsilon", 1e-5),
                       get("rope.freq_base", 10000.0), get("context_length", 2048), tied,
                       get("attention.key_length", 0))

def rotate(x: Tensor, positions: Tensor, theta: float) -> Tensor:
  """Rotary embedding in the Hugging Face layout: x (batch, heads, L, d) with pairs (i, i + d/2), rotated by
  positions (L,) * theta^(-2i/d)."""
  half = x.shape[-1] // 2
  inv_freq = 1.0 / (theta ** (Tensor.arange(0, x.shape[-1], 2, dtype=dtypes.float32) / x.shape[-1]))
  angle = positions.cast(dtypes.float32).reshape(-1, 1) * inv_freq.reshape(1, -1)  # (L, d/2)
  cos, sin = angle.cos().cat(angle.cos(), dim=-1), angle.sin().cat(angle.sin(), dim=-1)
  rotated = (-x[..., half:]).cat(x[..., :half], dim=-1)
  return x * cos + rotated * sin

class Attention:
  def __init__(self, cfg: LlamaConfig):
    self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.dim_per_head
    self.theta, self.cache = cfg.rope_theta, None
    self.q_proj = Linear(cfg.hidden_size, self.heads * self.head_dim, bias=False)
    self.k_proj = Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
    self.v_proj = Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=False)
    self.o_proj = Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)

  def __call__(self, x: Tensor, positions: Tensor, mask: Tensor, max_context: int) -> Tensor:
    b, length, _ = x.shape
    q = self.q_proj(x).reshape(b, length, self.heads, self.head_dim).transpose(1, 2)
    k = self.k_proj(x).reshape(b, length, self.kv_heads, self.head_dim).transpose(1, 2)
    v = self.v_proj(x).reshape(b, length, self.kv_heads, self.head_dim).transpose(1, 2)
    q, k = rotate(q, positions, self.theta), rotate(k, positions, self.theta)
    if self.cache is None or self.cache.k.shape[0] != b:
      self.cache = KVCache(b, self.kv_heads, max_context, self.head_dim)
    keys, values = self.cache.update(k, v, positions)
    out = q.scaled_dot_product_attention(keys, values, mask, enable_gqa=True)
    return self.o_proj(out.transpose(1, 2).reshape(b, length, self.heads * self.head_dim))

class MLP:
  def __init__(self, cfg: LlamaConfig):
    self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
    self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
    self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

  def __call__(self, x: Tensor) -> Tensor: return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))

class Layer:
  def __init__(self, cfg: LlamaConfig):
    self.self_attn, self.mlp = Attention(cfg), MLP(cfg)
    self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

  def __call__(self, x: Tensor, positions: Tensor, mask: Tensor, max_context: int) -> Tensor:
    x = x + self.self_attn(self.input_layernorm(x), positions, mask, max_context)
    return x + self.mlp(self.post_attention_layernorm(x))

class Llama:
  def __init__(self, cfg: LlamaConfig, max_context: int | None = None):
    self.cfg, self.max_context = cfg, min(max_context or cfg.max_position_embeddings, cfg.max_position_embeddings)
    self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
    self.layers = [Layer(cfg) for _ in range(cfg.num_hidden_layers)]
    self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
    self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

  def __call__(self, tokens: Tensor, start_pos: Pos = 0, last_only: bool = True) -> Tensor:
    """Logits (batch, vocab) of the last token (or (batch, L, vocab)) for tokens (batch, L) at start_pos.."""
    positions = Tensor.arange(tokens.shape[1]) + start_pos
    x, mask = self.embed_tokens(tokens), causal_mask(positions, self.max_context)
    for layer in self.layers: x = layer(x, positions, mask, self.max_context)
    x = self.norm(x[:, -1] if last_only else x)
    return self.lm_head(x) if self.lm_head is not None else x.matmul(self.embed_tokens.weight.T)

# *** loading ***

GGUF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}

def unpermute_rope(w: Tensor, heads: int) -> Tensor:
  """llama.cpp stores q and k rows with each head's rotary pairs interleaved (2i, 2i+1); back to HF's (i, i + d/2)."""
  return w.reshape(heads, -1, 2, w.shape[-1]).transpose(1, 2).reshape(w.shape)

def gguf_to_hf(kv: dict[str, Any], weights: dict[str, Tensor]) -> tuple[LlamaConfig, dict[str, Tensor]]:
  """Config and HF-named float32 weights (our model's names) from a GGUF llama file."""
  if "token_embd.weight" not in weights: raise ValueError("llama: the GGUF file has no token_embd.weight")
  cfg = LlamaConfig.from_gguf(kv, weights["token_embd.weight"].shape[0], "output.weight" not in weights)
  out = {}
  for name, w in weights.items():
    parts = name.split(".")
    if name == "token_embd.weight": key = "embed_tokens.weight"
    elif name == "output_norm.weight": key = "norm.weight"
    elif name == "output.weight": key = "lm_head.weight"
    elif parts[0] == "blk" and parts[2] in GGUF_NAMES: key = f"layers.{parts[1]}.{GGUF_NAMES[parts[2]]}.{parts[3]}"
    else: continue  # e.g. rope_freqs: computed here
    if parts[-2:-1] == ["attn_q"]: w = unpermute_rope(w, cfg.num_attention_heads)
    if parts[-2:-1] == ["attn_k"]: w = unpermute_rope(w, cfg.num_key_value_heads)
    out[key] = w.cast(dtypes.float32)
  return cfg, out

def hf_weights(path: pathlib.Path) -> dict[str, Tensor]:
  """model.safetensors, or the shards listed in model.safetensors.index.json, without the 'model.' prefix."""
  if (path / "model.safetensors").is_file(): files = [path / "model.safetensors"]
  else: files = [path / f for f in sorted(set(json.loads((path / "model.safetensors.index.json").read_text())
                                                        ["weight_map"].values()))]
  weights = {k: v for f in files for k, v in safe_load(f).items()}
  return {k.removeprefix("model."): v.cast(dtypes.float32) for k, v in weights.items() if "rotary_emb" not in k}

def load_llama(model: str, max_context: int | None = None) -> tuple[Llama, pathlib.Path | None]:
  """A model from a HF directory or a GGUF file (a path or an URL); returns it and the tokenizer.json (or None)."""
  path = fetch(model, subdir="llama") if model.startswith(("http://", "https://")) else pathlib.Path(model)
  tok = None
  if path.is_dir():
    cfg, weights = LlamaConfig.from_hf(json.loads((path / "config.json").read_text())), hf_weights(path)
    tok = path / "tokenizer.json" if (path / "tokenizer.json").is_file() else None
  elif path.is_file(): cfg, weights = gguf_to_hf(*gguf_load(path))
  else: raise ValueError(f"llama: {model!r} is neither a directory nor a GGUF file")
  if cfg.tie_word_embeddings: weights.pop("lm_head.weight", None)
  net = Llama(cfg, max_context)
  load_state_dict(net, weights, verbose=False)
  return net, tok

def tiny_llama(max_context: int = 64, seed: int = 0) -> Llama:
  """A random tiny LLaMA: 2 layers, 64 wide, 4 query heads sharing 2 key/value heads, 256 tokens."""
  Tensor.manual_seed(seed)
  return Llama(LlamaConfig(256, 64, 128, 2, 4, 2, max_position_embeddings=max_context), max_context)

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model", help="a HF checkpoint directory, a .gguf file, or an URL of one")
  p.add_argument("--tiny", action="store_true", help="a random tiny model instead")
  p.add_argument("--prompt", default="The capital of France is")
  p.add_argument("--count", type=int, default=20, help="tokens to generate")
  p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
  p.add_argument("--top_k", type=int, default=40, help="sample among the k most likely (0: all)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--max_context", type=int, default=128, help="the size of the KV cache")
  args = p.parse_args()
  if not args.tiny and not args.model: p.error("give --model PATH_OR_URL or --tiny")
  net, tok = (tiny_llama(args.max_context), None) if args.tiny else load_llama(args.model, args.max_context)
  encode, decode = text_codec(tok, net.cfg.vocab_size)
  gen = Generator(net, net.max_context)
  run_generation(gen, encode(args.prompt), args.count, args.temperature, args.top_k, args.seed, decode)

if __name__ == "__main__":
  main()
