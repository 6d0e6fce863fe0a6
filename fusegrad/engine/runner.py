"""Runners: what an ExecItem runs. A CompiledRunner is one kernel (its ProgramSpec, compiled and loaded on its first
call or before, with others, by compile_runners); a CopyRunner moves a buffer between devices."""
from __future__ import annotations
import time
from typing import Any, Callable
from fusegrad.device import Buffer, Device, CompileError
from fusegrad.helpers import colored, GlobalCounters
from fusegrad.uop.ops import UOp
from fusegrad.codegen import ProgramSpec

class Runner:
  """Something an ExecItem runs: a compiled kernel or a copy."""
  def __init__(self, name: str, device: str, flops: int = 0): self.name, self.device, self.flops = name, device, flops
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
    raise NotImplementedError
  def run(self, bufs: list[Buffer], mem: int, var_vals: dict[UOp, int] | None = None,
          wait: bool = False) -> float | None:
    """How a realize runs it (ExecItem.run; a quick plan's kernels, which have no variables: engine/realize.py
    run_ready): bufs allocated where they aren't yet, the run counted in GlobalCounters (mem: the bytes bufs hold).
    A plain call (BEAM times candidates so) allocates and counts nothing."""
    for b in bufs:
      if b._buf is None: b.allocate()
    et = self(bufs, var_vals or {}, wait)
    GlobalCounters.global_ops += self.flops
    GlobalCounters.global_mem += mem
    if isinstance(self, CompiledRunner): GlobalCounters.kernel_count += 1
    if et is not None: GlobalCounters.time_sum_s += et
    return et

class CompiledRunner(Runner):
  """A kernel compiled for its device: compiled on its first call, or before, with others (compile_runners)."""
  def __init__(self, p: ProgramSpec):
    super().__init__(p.name, p.device, p.flops)
    self.p = p
    self.prg: Any = None  # the device's program, once loaded
  def __getstate__(self) -> dict: return {**self.__dict__, "prg": None}  # pickled: loaded again on its first call
  def load(self, lib: bytes | CompileError | None = None) -> None:
    """Load the kernel from lib (compiled with others), or compile it (from the disk cache when there)."""
    compiler, name = Device[self.p.device].compiler_for(self.p.compiler), self.p.function_name
    if isinstance(lib, CompileError): raise CompileError(f"kernel {name}: {lib}") from lib
    if lib is None:
      try: lib = compiler.compile_cached(self.p.src)
      except CompileError as e: raise CompileError(f"kernel {name}: {e}") from e
    try: self.prg = Device[self.p.device].runtime(name, lib)
    except (OSError, RuntimeError):  # a cached binary the loader rejects (damaged before its checksum was taken)
      self.prg = Device[self.p.device].runtime(name, compiler.compile_cached(self.p.src, True))
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
    if self.prg is None: self.load()
    vals: tuple[int, ...] = ()
    if self.p.vars:
      by_name = {v.arg[0]: val for v, val in var_vals.items()}  # codegen may have retyped the variables
      vals = tuple(by_name[v.arg[0]] for v in self.p.vars)
    return self.prg(*[b._buf for b in bufs], global_size=self.p.global_size, local_size=self.p.local_size, vals=vals,
                    wait=wait)

Todo = dict[tuple[str, int], dict[str, list[CompiledRunner]]]  # (device, compiler) -> source -> its runners

def batch_add(todo: Todo, r: Runner, seen: dict[str, list[CompiledRunner]]) -> tuple[str, int] | None:
  """Put r in todo if it is a kernel not compiled yet (with the runners of its source if that is on its way: seen)."""
  if not isinstance(r, CompiledRunner) or r.prg is not None: return None
  if (rs := seen.get(r.p.src)) is not None:
    if r not in rs: rs.append(r)
    return None
  seen[r.p.src] = todo.setdefault(key := (r.p.device, r.p.compiler), {}).setdefault(r.p.src, [])
  seen[r.p.src].append(r)
  return key

Started = list[tuple[list[list[CompiledRunner]], Callable[[], list[bytes | CompileError]]]]

def batch_start(key: tuple[str, int], by_src: dict[str, list[CompiledRunner]], units: int = 0) -> Started:
  return [(list(by_src.values()), Device[key[0]].compiler_for(key[1]).start_cached_batch(list(by_src), units))]

def batch_load(started: Started) -> None:
  """Wait for the batches started and load their kernels. CompileError (naming the kernel) for the first that failed;
  every batch is waited for even then."""
  error: BaseException | None = None
  for runners, wait in started:
    try:
      for rs, lib in zip(runners, wait()):
        for r in rs:
          if error is None: r.load(lib)
    except BaseException as e: error = error or e
  if error is not None: raise error

def compile_runners(runners: list[Runner]) -> None:
  """Compile the kernels not compiled yet together: one batch per device (see Compiler.compile_batch). CompileError
  (naming the kernel) for the first that fails."""
  todo, seen = Todo(), dict[str, list[CompiledRunner]]()
  for r in runners: batch_add(todo, r, seen)
  batch_load([x for key, by_src in todo.items() for x in batch_start(key, by_src)])

class CopyRunner(Runner):
  """Moves a whole buffer between devices (or within one, for clone)."""
  def __init__(self, device: str, src_device: str, nbytes: int):
    super().__init__(colored(f"copy {nbytes:8d}, {device[:9]:>9s} <- {src_device[:9]:9s}", "yellow"), device)
  def launcher(self, bufs: list[Buffer], old: Any = None) -> Callable[[], None] | None:
    """The copy as a call of nothing queuing it, where the devices queue copies (copy_launcher; old: the last one)."""
    dest, src = bufs
    if (make := getattr(Device[dest.device].allocator, "copy_launcher", None)) is None: return None
    return make(dest._buf, Device[src.device].allocator, src._buf, dest.nbytes, old)
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
    dest, src = bufs
    st = time.perf_counter()
    src_alloc, dest_alloc = Device[src.device].allocator, Device[dest.device].allocator
    if (launch := self.launcher(bufs)) is not None: launch()
    elif hasattr(src_alloc, "as_memoryview"): dest.copyin(src_alloc.as_memoryview(src._buf))
    elif hasattr(dest_alloc, "as_memoryview"): src.copyout(dest_alloc.as_memoryview(dest._buf))
    else: dest.copyin(memoryview(src.as_bytes()))
    if wait:
      Device[dest.device].synchronize()
      return time.perf_counter() - st
    return None
