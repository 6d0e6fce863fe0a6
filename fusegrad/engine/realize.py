"""Running a schedule: each ScheduleItem becomes an ExecItem (a compiled kernel or a copy, with its buffers) and runs.

Compiled programs are cached in memory per (device, kernel AST) and on disk per source (see Compiler.compile_cached).
DEBUG=2 prints one line per kernel with its time, GFLOPS and GB/s. TinyJit captures ExecItems while they run.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from fusegrad.device import Buffer, Device
from fusegrad.helpers import DEBUG, GlobalCounters, colored, ansilen, time_to_str, to_function_name, dprint
from fusegrad.uop.ops import UOp, Ops
from fusegrad.codegen import ProgramSpec, get_program
from fusegrad.engine.schedule import ScheduleItem

class Runner:
  """Something an ExecItem runs: a compiled kernel or a copy."""
  def __init__(self, name: str, device: str, flops: int = 0):
    self.name, self.device, self.flops = name, device, flops
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
    raise NotImplementedError

class CompiledRunner(Runner):
  """A kernel compiled for its device."""
  def __init__(self, p: ProgramSpec):
    super().__init__(p.name, p.device, p.flops)
    self.p = p
    dev = Device[p.device]
    self.lib = dev.compiler.compile_cached(p.src)
    try: self.prg = dev.runtime(to_function_name(p.name), self.lib)
    except (OSError, RuntimeError):  # a cached binary the loader rejects (damaged before its checksum was taken)
      self.lib = dev.compiler.compile_cached(p.src, fresh=True)
      self.prg = dev.runtime(to_function_name(p.name), self.lib)
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
    by_name = {v.arg[0]: val for v, val in var_vals.items()}  # codegen may have retyped the variables
    vals = tuple(by_name[v.arg[0]] for v in self.p.vars)
    return self.prg(*[b._buf for b in bufs], global_size=self.p.global_size, local_size=self.p.local_size, vals=vals,
                    wait=wait)

class CopyRunner(Runner):
  """Moves a whole buffer between devices (or within one, for clone)."""
  def __init__(self, device: str, src_device: str, nbytes: int):
    super().__init__(colored(f"copy {nbytes:8d}, {device[:7]:>7s} <- {src_device[:7]:7s}", "yellow"), device)
  def __call__(self, bufs: list[Buffer], var_vals: dict[UOp, int], wait: bool = False) -> float | None:
    import time
    dest, src = bufs
    st = time.perf_counter()
    src_alloc, dest_alloc = Device[src.device].allocator, Device[dest.device].allocator
    if hasattr(src_alloc, "as_memoryview"): dest.copyin(src_alloc.as_memoryview(src._buf))
    elif hasattr(dest_alloc, "as_memoryview"): src.copyout(dest_alloc.as_memoryview(dest._buf))
    else: dest.copyin(memoryview(src.as_bytes()))
    if wait:
      Device[dest.device].synchronize()
      return time.perf_counter() - st
    return None

method_cache: dict[tuple[str, UOp], CompiledRunner] = {}

def get_runner(device: str, ast: UOp) -> CompiledRunner:
  """The compiled program for a kernel AST on a device (compiled once per process, and cached on disk)."""
  key = (device, ast)
  if (ret := method_cache.get(key)) is None:
    ret = method_cache[key] = CompiledRunner(get_program(ast, Device[device].renderer))
  return ret

# while TinyJit captures, every ExecItem that runs is appended to the list on top of this stack
capturing: list[list[ExecItem]] = []

@dataclass
class ExecItem:
  runner: Runner
  bufs: list[Buffer]
  var_vals: dict[UOp, int] = field(default_factory=dict)
  def run(self, var_vals: dict[UOp, int] | None = None, wait: bool = False, jit: bool = False) -> float | None:
    for b in self.bufs: b.allocate()
    vv = self.var_vals if var_vals is None else {**self.var_vals, **var_vals}
    et = self.runner(self.bufs, vv, wait=wait or DEBUG >= 2)
    GlobalCounters.global_ops += self.runner.flops
    GlobalCounters.global_mem += sum(b.nbytes for b in self.bufs)
    if isinstance(self.runner, CompiledRunner): GlobalCounters.kernel_count += 1
    if et is not None: GlobalCounters.time_sum_s += et
    if DEBUG >= 2: self._print(et, jit)
    return et
  def _print(self, et: float | None, jit: bool) -> None:
    mem = sum(b.nbytes for b in self.bufs)
    ptm = time_to_str(et) if et is not None else "      ?"
    flops_s = f"{self.runner.flops / et * 1e-9:9.2f} GFLOPS" if et else ""
    gbs = f"{mem / et * 1e-9:7.2f} GB/s" if et else ""
    name = self.runner.name + " " * max(38 - ansilen(self.runner.name), 0)
    tag = colored(f"*** {self.runner.device[:7]:7s} {GlobalCounters.kernel_count:4d}", "magenta" if jit else "green")
    print(f"{tag} {name} "
          f"arg {len(self.bufs):2d} mem {GlobalCounters.mem_used / 1e9:5.2f} GB "
          f"tm {ptm}/{GlobalCounters.time_sum_s * 1e3:9.2f}ms "
          f"({flops_s} {gbs})")

def lower_schedule_item(si: ScheduleItem) -> ExecItem:
  if si.ast.op is Ops.COPY:
    return ExecItem(CopyRunner(si.bufs[0].device, si.bufs[1].device, si.bufs[0].nbytes), list(si.bufs))
  return ExecItem(get_runner(si.bufs[0].device, si.ast), list(si.bufs), dict(si.var_vals))

def run_schedule(schedule: list[ScheduleItem], var_vals: dict[UOp, int] | None = None) -> None:
  """Compile (or find cached) and run each item in order; TinyJit, if capturing, records them."""
  for si in schedule:
    ei = lower_schedule_item(si)
    if capturing: capturing[-1].append(ei)
    ei.run(var_vals)
  if schedule: dprint(3, f"ran {len(schedule)} schedule items")
