"""The process-replay tool's comparison (test/process_replay.py): a changed kernel, a kernel only one side rendered and
an unchanged kernel, from recordings written as PROCESS_REPLAY writes them; and PROCESS_REPLAY records real kernels."""
import json, os, subprocess, sys
from test.process_replay import load, compare

def write(path, recs):
  path.write_text("".join(json.dumps({"id": i, "name": n, "src": s}) + "\n" for i, n, s in recs))
  return path

def test_compare_reports_each_difference(tmp_path, capsys):
  old = load(write(tmp_path / "a.jsonl", [("k1", "E_4", "a+b"), ("k2", "r_8", "sum"), ("k3", "E_2", "x"),
                                          ("k1", "E_4", "a+b")]))  # a kernel rendered twice counts once
  new = load(write(tmp_path / "b.jsonl", [("k1", "E_4", "a+b"), ("k2", "r_8", "sum2"), ("k4", "E_9", "y")]))
  assert compare("w", old, new, max_diffs=10) == 3
  out = capsys.readouterr().out
  assert "kernel k2 (r_8) changed" in out and "-sum" in out and "+sum2" in out
  assert "k3 (E_2) rendered only on the ref" in out and "k4 (E_9) rendered only on the tree" in out
  assert "k1" not in out and "1 changed, 1 only on the ref, 1 only on the tree" in out
  assert compare("w", old, old, max_diffs=10) == 0

def test_recording_names_each_kernel_once_per_identity(tmp_path):
  path = tmp_path / "rec.jsonl"
  code = "from fusegrad import Tensor; [(Tensor.ones(4).contiguous() * 2).sum().item() for _ in range(2)]"
  env = {**os.environ, "PROCESS_REPLAY": str(path), "DISABLE_COMPILER_CACHE": "1"}
  subprocess.run([sys.executable, "-c", code], check=True, env=env)
  kernels = load(path)
  assert kernels and all(len(srcs) == 1 and srcs[0] for _, srcs in kernels.values())
