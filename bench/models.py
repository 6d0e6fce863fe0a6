"""The example models, fusegrad against PyTorch eager (transformers) on the same machine, same weights, one run.

  python bench/models.py

GPT-2 (tiny and 124M-sized, random weights): tokens/s of cached greedy decoding (fusegrad: one TinyJit replay per
token; PyTorch: transformers with past_key_values), after a prompt of PROMPT tokens, steady state (the first tokens,
which compile and capture, are not timed). MiniLM (all-MiniLM-L6-v2): sentences/s embedding a batch of 64 sentences
(fusegrad plain and under TinyJit). Settings: STEPS (decoded tokens timed, 32), PROMPT (8), CONTEXT (KV cache, 128),
THREADS (PyTorch's threads, all cores; on a machine busy with other work THREADS=1 is fairer to PyTorch, whose
thread pool then waits for a second core on every op).
"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from fusegrad import Tensor, TinyJit
from fusegrad.helpers import getenv
from examples.gpt2 import GPT2, GPT2Config, Generator

STEPS, PROMPT, CONTEXT = getenv("STEPS", 32), getenv("PROMPT", 8), getenv("CONTEXT", 128)
THREADS = getenv("THREADS", os.cpu_count() or 1)
WARMUP = 3  # decoded tokens not timed: the first runs normally, the second captures

def median_rate(times: list[float], per_call: int) -> float: return per_call / float(np.median(times))

def gpt2_fusegrad(hf_model, cfg: GPT2Config, prompt: list[int]) -> tuple[float, list[int]]:
  net = GPT2(cfg, CONTEXT)
  net.load_hf({k: Tensor(v.numpy()) for k, v in hf_model.state_dict().items()})
  gen = Generator(net, CONTEXT)
  token, pos, times, tokens = int(np.argmax(gen.prefill(prompt))), len(prompt), [], []
  for i in range(WARMUP + STEPS):
    st = time.perf_counter()
    token = int(np.argmax(gen.decode(token, pos)))
    if i >= WARMUP: times.append(time.perf_counter() - st)
    tokens.append(token)
    pos += 1
  return median_rate(times, 1), tokens

def gpt2_torch(hf_model, prompt: list[int]) -> tuple[float, list[int]]:
  import torch
  with torch.no_grad():
    out = hf_model(torch.tensor([prompt]), use_cache=True)
    past, token, times, tokens = out.past_key_values, int(out.logits[0, -1].argmax()), [], []
    for i in range(WARMUP + STEPS):
      st = time.perf_counter()
      out = hf_model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
      past, token = out.past_key_values, int(out.logits[0, -1].argmax())
      if i >= WARMUP: times.append(time.perf_counter() - st)
      tokens.append(token)
  return median_rate(times, 1), tokens

def hf_gpt2(cfg: GPT2Config):
  import torch, transformers
  torch.manual_seed(0)
  return transformers.GPT2LMHeadModel(transformers.GPT2Config(
    vocab_size=cfg.vocab_size, n_positions=cfg.n_positions, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
    n_head=cfg.n_head, initializer_range=0.2 if cfg.n_embd < 128 else 0.02)).eval()

def minilm_torch(path, ids: np.ndarray, mask: np.ndarray) -> tuple[float, np.ndarray]:
  import torch, transformers
  ref = transformers.BertModel.from_pretrained(path, add_pooling_layer=False).eval()
  times = []
  with torch.no_grad():
    for _ in range(5):
      st = time.perf_counter()
      m = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
      states = ref(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask)).last_hidden_state
      want = torch.nn.functional.normalize((states * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1).numpy()
      times.append(time.perf_counter() - st)
  return median_rate(times[1:], len(ids)), want

def minilm_fusegrad(enc, sentences: list[str], ids: np.ndarray, mask: np.ndarray) -> tuple[float, float, np.ndarray]:
  tid, tmask = Tensor(ids).realize(), Tensor(mask).realize()
  jit = TinyJit(lambda i, m: enc.model.embed(i, m).realize())
  plain, jitted = [], []
  for _ in range(5):
    st = time.perf_counter()
    enc.encode(sentences)
    plain.append(time.perf_counter() - st)
    st = time.perf_counter()
    got = jit(tid, tmask).numpy()
    jitted.append(time.perf_counter() - st)
  return median_rate(plain[2:], len(ids)), median_rate(jitted[2:], len(ids)), got

def main() -> None:
  import torch
  from examples.minilm import SentenceEncoder, SENTENCES, default_model_dir
  torch.set_num_threads(THREADS)
  configs = {"tiny": GPT2Config(vocab_size=256, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4),
             "124M": GPT2Config(n_positions=1024)}
  models = {name: hf_gpt2(cfg) for name, cfg in configs.items()}
  rng = np.random.default_rng(0)
  prompts = {name: rng.integers(0, cfg.vocab_size, PROMPT).tolist() for name, cfg in configs.items()}
  path = default_model_dir()
  sentences = [f"{s} (number {i})" for i, s in enumerate(SENTENCES * 13)][:64]
  enc = SentenceEncoder(path)
  ids, mask = enc.tokenize(sentences)
  # PyTorch first: once fusegrad's OpenMP threads have run they spin a while after each kernel, and would slow down
  # PyTorch's own threads in this process
  torch_gpt2 = {name: gpt2_torch(models[name], prompts[name]) for name in configs}
  torch_minilm, want = minilm_torch(path, ids, mask)
  for name, cfg in configs.items():
    fg_rate, fg_tokens = gpt2_fusegrad(models[name], cfg, prompts[name])
    pt_rate, pt_tokens = torch_gpt2[name]
    same = sum(a == b for a, b in zip(fg_tokens, pt_tokens))
    print(f"GPT-2 {name:5s} decode: fusegrad {fg_rate:8.1f} tok/s   PyTorch {pt_rate:8.1f} tok/s   "
          f"ratio {fg_rate / pt_rate:5.2f}x   (greedy tokens equal: {same}/{len(pt_tokens)})")
  plain, jitted, got = minilm_fusegrad(enc, sentences, ids, mask)
  for what, fg in (("plain", plain), ("TinyJit", jitted)):
    print(f"MiniLM batch 64 ({ids.shape[1]} tokens), {what:7s}: fusegrad {fg:7.1f} sentences/s   PyTorch "
          f"{torch_minilm:7.1f} sentences/s   ratio {fg / torch_minilm:5.2f}x")
  print(f"  max abs difference of the embeddings: {abs(got - want).max():.1e}")

if __name__ == "__main__":
  main()
