"""GPT-2 (the Hugging Face checkpoints' architecture) with a KV cache, generating text under TinyJit.

  PYTHONPATH=. python examples/gpt2.py --tiny                          # a random tiny model, runs anywhere
  PYTHONPATH=. python examples/gpt2.py --model gpt2 --prompt "Hello"   # fetches the 124M checkpoint (online)
  PYTHONPATH=. python examples/gpt2.py --model path/to/hf_dir          # config.json, model.safetensors, tokenizer.json

The cache has a fixed size (max_context); the position of a decoded token is a bound Variable, so every token
replays the same captured kernels: new keys and values are written into the cache slot `pos` and attention reads
the whole cache with a mask `key position <= pos`."""
from __future__ import annotations
import argparse, json, pathlib, time
from dataclasses import dataclass
from typing import Any, Callable, Iterator
import numpy as np
from fusegrad import Tensor, TinyJit, Variable, UOp, fetch, dtypes
from fusegrad.nn import Embedding, LayerNorm, Linear
from fusegrad.nn.state import safe_load, load_state_dict, get_parameters

Pos = int | UOp  # the position of the first token of a call: a number, or a bound Variable under the JIT

@dataclass(frozen=True)
class GPT2Config:
  vocab_size: int = 50257
  n_positions: int = 1024
  n_embd: int = 768
  n_layer: int = 12
  n_head: int = 12
  layer_norm_epsilon: float = 1e-5

  @staticmethod
  def from_json(cfg: dict[str, Any]) -> GPT2Config:
    return GPT2Config(**{k: cfg[k] for k in GPT2Config.__dataclass_fields__ if k in cfg})

HF_CONFIGS = {"gpt2": GPT2Config(), "gpt2-medium": GPT2Config(n_embd=1024, n_layer=24, n_head=16),
              "gpt2-large": GPT2Config(n_embd=1280, n_layer=36, n_head=20),
              "gpt2-xl": GPT2Config(n_embd=1600, n_layer=48, n_head=25)}

# *** the KV cache and generation, shared with llama.py ***

class KVCache:
  """Keys and values (batch, heads, max_context, head_dim) of one layer, in buffers that keep their place, so a
  jitted step writes into the same memory every token."""
  def __init__(self, batch: int, heads: int, max_context: int, head_dim: int):
    self.max_context = max_context
    self.k = Tensor.zeros(batch, heads, max_context, head_dim).contiguous().realize()
    self.v = Tensor.zeros(batch, heads, max_context, head_dim).contiguous().realize()

  def update(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """Write k, v (batch, heads, L, head_dim) at positions (L,) now, and return the whole cache."""
    slot = positions.reshape(-1, 1) == Tensor.arange(self.max_context).reshape(1, -1)  # (L, max_context)
    place = slot.T.cast(k.dtype)  # (max_context, L): one 1 per written row
    untouched = (slot.sum(0) == 0).reshape(-1, 1)  # (max_context, 1)
    # realized here, so self.k and self.v stand for their buffers again: left lazy, the next token's graph would hold
    # this write's whole expression and compute it once more
    new_v = self.v.assign(untouched.where(self.v, place.matmul(v)))
    self.k.assign(untouched.where(self.k, place.matmul(k))).realize(new_v)
    return self.k, self.v

def causal_mask(positions: Tensor, max_context: int) -> Tensor:
  """(L, max_context) bool: query i (at positions[i]) sees keys at positions <= positions[i]."""
  return Tensor.arange(max_context).reshape(1, -1) <= positions.reshape(-1, 1)

def sample(logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator) -> int:
  """One token from a row of logits: greedy for temperature 0, else softmax(logits / temperature) over the top_k."""
  if temperature <= 0: return int(np.argmax(logits))
  z = logits.astype(np.float64) / temperature
  if 0 < top_k < z.size: z[np.argpartition(z, -top_k)[:-top_k]] = -np.inf
  p = np.exp(z - z.max())
  return int(rng.choice(z.size, p=p / p.sum()))

class Generator:
  """Runs model(tokens (1, L), start_pos) -> logits (1, vocab) of the last token: the prompt in one call, then
  one token per call under TinyJit with the position as a bound Variable."""
  def __init__(self, model: Callable[[Tensor, Pos], Tensor], max_context: int):
    self.forward, self.max_context = model, max_context
    # weights still lazy (a random init) become buffers now: else every replay recomputes them (kernels per weight)
    Tensor.realize_all(get_parameters(model))
    self.pos_var = Variable("start_pos", 0, max_context - 1)
    self.step = TinyJit(lambda tok, pos: self.forward(tok, pos).realize())

  def prefill(self, prompt: list[int]) -> np.ndarray:
    if not 0 < len(prompt) <= self.max_context:
      raise ValueError(f"prompt of {len(prompt)} tokens doesn't fit in max_context={self.max_context}")
    return self.forward(Tensor([prompt], dtype=dtypes.int32), 0).numpy()[0]

  def decode(self, token: int, pos: int) -> np.ndarray:
    if pos >= self.max_context: raise ValueError(f"position {pos} is past max_context={self.max_context}")
    return self.step(Tensor([[token]], dtype=dtypes.int32).realize(), self.pos_var.bind(pos)).numpy()[0]

  def generate(self, prompt: list[int], count: int, temperature: float = 0.0, top_k: int = 0,
               seed: int = 0) -> Iterator[int]:
    """Yield count new tokens after the prompt."""
    rng = np.random.default_rng(seed)
    logits, pos = self.prefill(prompt), len(prompt)
    for i in range(count):
      token = sample(logits, temperature, top_k, rng)
      yield token
      if i + 1 < count: logits, pos = self.decode(token, pos), pos + 1

def run_generation(gen: Generator, prompt: list[int], count: int, temperature: float, top_k: int, seed: int,
                   show: Callable[[list[int]], str]) -> list[int]:
  """Print the text as it comes, then a tokens/s line for the cached decoding (the first token aside)."""
  out: list[int] = []
  print(show(prompt), end="", flush=True)
  start = time.perf_counter()
  for token in gen.generate(prompt, count, temperature, top_k, seed):
    if len(out) == 1: start = time.perf_counter()  # time the steady decoding, not the prompt
    out.append(token)
    print(show([token]), end="", flush=True)
  elapsed = time.perf_counter() - start
  print(f"\n{len(out) - 1} tokens in {elapsed:.2f} s: {(len(out) - 1) / max(elapsed, 1e-9):.1f} tokens/s")
  return out

# *** the model ***

class Block:
  def __init__(self, cfg: GPT2Config):
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.ln_1 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
    self.c_attn = Linear(cfg.n_embd, 3 * cfg.n_embd)
    self.c_proj = Linear(cfg.n_embd, cfg.n_embd)
    self.ln_2 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
    self.c_fc = Linear(cfg.n_embd, 4 * cfg.n_embd)
    self.mlp_proj = Linear(4 * cfg.n_embd, cfg.n_embd)
    self.cache: KVCache | None = None

  def __call__(self, x: Tensor, positions: Tensor, mask: Tensor, max_context: int) -> Tensor:
    b, length, dim = x.shape
    q, k, v = self.c_attn(self.ln_1(x)).reshape(b, length, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
    if self.cache is None or self.cache.k.shape[0] != b:
      self.cache = KVCache(b, self.n_head, max_context, self.head_dim)
    keys, values = self.cache.update(k, v, positions)
    attn = q.scaled_dot_product_attention(keys, values, mask).permute(0, 2, 1, 3).reshape(b, length, dim)
    x = x + self.c_proj(attn)
    return x + self.mlp_proj(self.c_fc(self.ln_2(x)).gelu(approximate="tanh"))

class GPT2:
  def __init__(self, cfg: GPT2Config, max_context: int | None = None):
    self.cfg, self.max_context = cfg, min(max_context or cfg.n_positions, cfg.n_positions)
    # the vocabulary padded to a multiple of 64 (zero rows, logits cut off): 50257 output columns have no factor the
    # compiler can tile registers by, and the head's matmul runs ~2.5x slower without
    self.wte = Embedding(-(-cfg.vocab_size // 64) * 64, cfg.n_embd)
    self.wpe = Embedding(cfg.n_positions, cfg.n_embd)
    self.h = [Block(cfg) for _ in range(cfg.n_layer)]
    self.ln_f = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)

  def __call__(self, tokens: Tensor, start_pos: Pos = 0, last_only: bool = True) -> Tensor:
    """Logits (batch, vocab) of the last token (or (batch, L, vocab)) for tokens (batch, L) at start_pos.."""
    positions = Tensor.arange(tokens.shape[1]) + start_pos
    x = self.wte(tokens) + self.wpe(positions)
    mask = causal_mask(positions, self.max_context)
    for block in self.h: x = block(x, positions, mask, self.max_context)
    if last_only: x = x[:, -1]
    return self.ln_f(x).matmul(self.wte.weight.T)[..., :self.cfg.vocab_size]  # tied embeddings

  def load_hf(self, weights: dict[str, Tensor]) -> None:
    """Load a Hugging Face GPT-2 state dict (names as in GPT2LMHeadModel or GPT2Model)."""
    sd = hf_to_fusegrad(weights)
    extra_rows = self.wte.vocab_sz - self.cfg.vocab_size
    if "wte.weight" in sd: sd["wte.weight"] = sd["wte.weight"].pad(((0, extra_rows), (0, 0)))
    load_state_dict(self, sd, verbose=False)

def hf_to_fusegrad(weights: dict[str, Tensor]) -> dict[str, Tensor]:
  """Rename a Hugging Face GPT-2 state dict to ours: Conv1D weights (in, out) become Linear's (out, in)."""
  out = {}
  for name, w in weights.items():
    name = name.removeprefix("transformer.")
    if name.endswith((".attn.bias", ".attn.masked_bias")) or name == "lm_head.weight": continue  # masks; tied head
    name = name.replace(".attn.c_attn.", ".c_attn.").replace(".attn.c_proj.", ".c_proj.")
    name = name.replace(".mlp.c_fc.", ".c_fc.").replace(".mlp.c_proj.", ".mlp_proj.")
    if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight", "mlp_proj.weight")): w = w.T
    out[name] = w.cast(dtypes.float32) if w.dtype != dtypes.float32 else w
  return out

def load_gpt2(model: str, max_context: int | None = None) -> tuple[GPT2, pathlib.Path | None]:
  """A model from a directory with config.json and model.safetensors, or a Hugging Face name fetched online.
  Returns the model and the tokenizer.json path (None if there is none)."""
  path = pathlib.Path(model)
  if path.is_dir():
    cfg = GPT2Config.from_json(json.loads((path / "config.json").read_text()))
    weights, tok = safe_load(path / "model.safetensors"), path / "tokenizer.json"
  elif model in HF_CONFIGS:
    cfg, base = HF_CONFIGS[model], f"https://huggingface.co/{model}/resolve/main/"
    weights = safe_load(fetch(base + "model.safetensors", subdir=model, name="model.safetensors"))
    tok = fetch(base + "tokenizer.json", subdir=model, name="tokenizer.json")
  else: raise ValueError(f"gpt2: {model!r} is neither a directory nor one of {sorted(HF_CONFIGS)}")
  net = GPT2(cfg, max_context)
  net.load_hf(weights)
  return net, tok if tok.is_file() else None

def tiny_gpt2(max_context: int = 64, seed: int = 0) -> GPT2:
  """A random tiny GPT-2 (2 layers, 64 wide, 256 tokens) with weights of a trained model's scale."""
  Tensor.manual_seed(seed)
  net = GPT2(GPT2Config(vocab_size=256, n_positions=max_context, n_embd=64, n_layer=2, n_head=4), max_context)
  for block in net.h:
    for lin in (block.c_attn, block.c_proj, block.c_fc, block.mlp_proj): lin.weight.assign(lin.weight * 2).realize()
  return net

def text_codec(tok_path: pathlib.Path | None, vocab_size: int) -> tuple[Callable[[str], list[int]],
                                                                         Callable[[list[int]], str]]:
  """encode, decode: the tokenizer's when there is one, else bytes as token ids."""
  if tok_path is None: return (lambda s: [b % vocab_size for b in s.encode()]), (lambda ids: f" {ids}")
  from tokenizers import Tokenizer
  tok = Tokenizer.from_file(str(tok_path))
  return (lambda s: tok.encode(s).ids), (lambda ids: tok.decode(ids))

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model", default="gpt2", help="a directory with a HF checkpoint, or gpt2 / gpt2-medium / ...")
  p.add_argument("--tiny", action="store_true", help="a random tiny model instead (no download)")
  p.add_argument("--prompt", default="The capital of France is")
  p.add_argument("--count", type=int, default=20, help="tokens to generate")
  p.add_argument("--temperature", type=float, default=0.8, help="0 is greedy")
  p.add_argument("--top_k", type=int, default=40, help="sample among the k most likely (0: all)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--max_context", type=int, default=128, help="the size of the KV cache")
  args = p.parse_args()
  net, tok = (tiny_gpt2(args.max_context), None) if args.tiny else load_gpt2(args.model, args.max_context)
  encode, decode = text_codec(tok, net.cfg.vocab_size)
  gen = Generator(net, net.max_context)
  run_generation(gen, encode(args.prompt), args.count, args.temperature, args.top_k, args.seed, decode)

if __name__ == "__main__":
  main()
