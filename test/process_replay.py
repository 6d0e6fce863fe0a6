#!/usr/bin/env python3
"""Process replay: which kernels does a change alter? Runs a fixed set of workloads on a git ref (main by default, in a
temporary `git worktree`) and on the working tree, records every kernel each one renders, and prints the kernels
whose source differs, with a diff.

  python test/process_replay.py                    # all workloads, main against the working tree
  python test/process_replay.py --ref HEAD~1 -w ops,mnist
  python test/process_replay.py --ref HEAD~3 --tree HEAD   # two commits (each recorded in a temporary worktree)

Recording is the PROCESS_REPLAY=path flag: codegen's get_program appends one JSON line {id, name, src} per kernel it
renders. The id is the kernel's identity (device, kernel AST, opts asked for), so the same kernel has the same id in
both runs whatever codegen does with it. The disk cache is off (DISABLE_COMPILER_CACHE=1) so that no kernel is
skipped, and each workload runs in one process, in the same order on both sides, so the in-process caches hide the
same kernels on both. A ref's recording is kept in the user cache dir per commit: comparing against the same main
again records only the working tree. A ref from before PROCESS_REPLAY existed records nothing.
"""
from __future__ import annotations
import argparse, difflib, json, os, pathlib, subprocess, sys, tempfile, time

OPS = ["test/test_ops.py", "test/test_ops_elementwise.py", "test/test_ops_movement.py", "test/test_ops_reduce.py",
       "test/test_ops_nn.py", "test/test_ops_linalg.py", "test/test_ops_reduce_split.py"]
MNIST_STEP = """
from fusegrad import Tensor, TinyJit, nn
from examples.beautiful_mnist import Model, make_optimizer
Tensor.manual_seed(0)
model = Model()
opt = make_optimizer(nn.state.get_parameters(model))
X, Y = Tensor.rand(32, 1, 28, 28), Tensor.randint(32, high=10)
@TinyJit
def step():
  with Tensor.train():
    opt.zero_grad()
    loss = model(X).sparse_categorical_crossentropy(Y).backward()
    opt.step()
    return loss
for _ in range(3): step().item()
with Tensor.test(): model(X).argmax(axis=1).numpy()
"""
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
WORKLOADS: dict[str, list[str]] = {  # name -> command, run in the tree's root
  "ops": PYTEST + OPS,
  "mnist": [sys.executable, "-c", MNIST_STEP],
  "gpt2": [sys.executable, "examples/gpt2.py", "--tiny", "--count", "4"],
  "llama": [sys.executable, "examples/llama.py", "--tiny", "--count", "4"],
  "onnx": PYTEST + ["test/test_onnx_models.py"],
}

def record(tree: pathlib.Path, workload: str, out: pathlib.Path) -> None:
  """Run one workload in tree with PROCESS_REPLAY=out (which starts empty)."""
  out.unlink(missing_ok=True)
  env = {**os.environ, "PYTHONPATH": str(tree), "PROCESS_REPLAY": str(out), "DISABLE_COMPILER_CACHE": "1",
         "PYTHONHASHSEED": "0"}
  start = time.perf_counter()
  ret = subprocess.run(WORKLOADS[workload], cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
  print(f"  {workload:6s} {tree}: {time.perf_counter() - start:6.1f} s, exit {ret.returncode}", file=sys.stderr)
  if ret.returncode != 0: print(ret.stderr[-2000:], file=sys.stderr)
  out.touch()

def load(path: pathlib.Path) -> dict[str, tuple[str, list[str]]]:
  """id -> (name, the distinct sources rendered under that id, in order)."""
  kernels: dict[str, tuple[str, list[str]]] = {}
  for line in path.read_text().splitlines():
    rec = json.loads(line)
    srcs = kernels.setdefault(rec["id"], (rec["name"], []))[1]
    if rec["src"] not in srcs: srcs.append(rec["src"])
  return kernels

def compare(workload: str, old: dict[str, tuple[str, list[str]]], new: dict[str, tuple[str, list[str]]],
            max_diffs: int) -> int:
  """Print the kernels whose source differs (with a diff) and the ones only one side rendered; return how many
  differ."""
  changed = [k for k in old if k in new and old[k][1] != new[k][1]]
  for k in changed[:max_diffs]:
    diff = difflib.unified_diff("\n".join(old[k][1]).splitlines(), "\n".join(new[k][1]).splitlines(),
                                f"ref/{old[k][0]}", f"tree/{new[k][0]}", lineterm="")
    print(f"*** kernel {k} ({old[k][0]}) changed\n" + "\n".join(diff))
  only_old, only_new = [k for k in old if k not in new], [k for k in new if k not in old]
  for side, ks, kernels in (("ref", only_old, old), ("tree", only_new, new)):
    for k in ks[:max_diffs]: print(f"*** kernel {k} ({kernels[k][0]}) rendered only on the {side}")
  print(f"{workload}: {len(old)} kernels on the ref, {len(new)} on the tree: {len(changed)} changed, "
        f"{len(only_old)} only on the ref, {len(only_new)} only on the tree")
  return len(changed) + len(only_old) + len(only_new)

def git(*args: str, cwd: pathlib.Path) -> str:
  return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

def record_ref(repo: pathlib.Path, ref: str, workloads: list[str], cache: pathlib.Path) -> list[pathlib.Path]:
  """The recordings of workloads on a git ref (kept per commit and CPU_ISA in cache: each ISA renders other kernels)."""
  sha, isa = git("rev-parse", ref, cwd=repo), os.environ.get("CPU_ISA", "")
  paths = [cache / f"{sha}{'-' + isa if isa else ''}-{w}.jsonl" for w in workloads]
  if all(p.exists() for p in paths): return paths
  with tempfile.TemporaryDirectory() as tmp:
    tree = pathlib.Path(tmp) / "ref"
    git("worktree", "add", "--detach", str(tree), sha, cwd=repo)
    try:
      for w, p in zip(workloads, paths):
        if not p.exists(): record(tree, w, p)
    finally: git("worktree", "remove", "--force", str(tree), cwd=repo)
  return paths

def main() -> int:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--ref", default="main", help="the git ref to compare the working tree against")
  p.add_argument("--tree", default="", help="a git ref to record instead of the working tree (the tree can change "
                 "while it runs)")
  p.add_argument("-w", "--workloads", default=",".join(WORKLOADS), help=f"comma-separated, of {','.join(WORKLOADS)}")
  p.add_argument("--max-diffs", type=int, default=20, help="kernels to print a diff for")
  args = p.parse_args()
  repo = pathlib.Path(__file__).resolve().parent.parent
  workloads = args.workloads.split(",")
  if unknown := [w for w in workloads if w not in WORKLOADS]: p.error(f"unknown workloads {unknown}")
  cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "fusegrad" / "replay"
  cache.mkdir(parents=True, exist_ok=True)
  differ = 0
  ref_paths = record_ref(repo, args.ref, workloads, cache)
  tree_paths = record_ref(repo, args.tree, workloads, cache) if args.tree else None
  with tempfile.TemporaryDirectory() as tmp:
    for i, (w, ref_path) in enumerate(zip(workloads, ref_paths)):
      if tree_paths is None: record(repo, w, tree_path := pathlib.Path(tmp) / f"{w}.jsonl")
      else: tree_path = tree_paths[i]
      differ += compare(w, load(ref_path), load(tree_path), args.max_diffs)
  print("process replay: no kernel changed" if differ == 0 else f"process replay: {differ} kernels differ")
  return 1 if differ else 0

if __name__ == "__main__":
  sys.exit(main())
