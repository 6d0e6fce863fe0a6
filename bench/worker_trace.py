"""Where the workers of two one-thread CPU devices spend a data-parallel MNIST step (bench/data_parallel.py's step):
each worker's launches are timed (its loop and the copy functions wrapped), and per step and worker the medians are
printed: when its first launch started after the call, the time in kernels (and copies within the device), in copies
between the devices (receives, with their waits for the other device's send; sends), waiting for work (the queue
empty), in Python between launches, and the sum of each exchange's median wait.

  python bench/worker_trace.py              # BS=128, STEPS=40
Busy machines make waits of other sessions' making: run it at a priority over them (e.g. `chrt -f 1`), or compare
runs made in the same minutes."""
import os, statistics, sys, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusegrad import Device, Context
from fusegrad.helpers import getenv
from fusegrad.runtime import ops_cpu
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_parallel

STEPS = getenv("STEPS", 40)
clock = time.perf_counter
log: dict[str, list[tuple]] = {}  # device -> (asked, got, done, what, waited) per launch
waited = threading.local()  # the wait inside the launch running on this worker

def _send(full, free, staging, src, nbytes) -> None:
  st = clock()
  free.acquire()  # the last receive of this copy is done
  waited.s = clock() - st
  try: ops_cpu.ctypes.memmove(staging, src, nbytes) if staging else None
  finally: full.release()
  if not staging:
    st = clock()
    with free: pass
    waited.s += clock() - st

def _receive(full, free, dest, src, nbytes) -> None:
  st = clock()
  full.acquire()  # the other device sent
  waited.s = clock() - st
  try: ops_cpu.ctypes.memmove(dest, src, nbytes)
  finally: free.release()

def _loop(self) -> None:
  """Worker._loop, each launch logged."""
  mine = log.setdefault(self.device, [])
  while True:
    asked = clock()
    fxn, args, keep = self.queue.get()
    got, waited.s = clock(), 0.0
    try: fxn(*args)
    except BaseException as e: self.error = self.error or e
    # (a copy within the device is ctypes.memmove: counted with the kernels)
    what = "send" if fxn is _send else "receive" if fxn is _receive else "other" if fxn.__class__ is type(len) \
      else "kernel"
    mine.append((asked, got, clock(), what, waited.s))
    del fxn, args, keep

def main() -> None:
  ops_cpu._snapshot, ops_cpu._copy_when_ready, ops_cpu.Worker._loop = _send, _receive, _loop  # (before the workers)
  with Context(CPU_THREADS=1): devices = tuple(Device[f"CPU:{i + 1}"].device for i in range(2))
  run = data_parallel.make_step(devices)
  for _ in range(3): run()
  steps = []
  for _ in range(STEPS):
    time.sleep(0.003)
    for d in devices: log[d].clear()
    start = clock()
    run()  # (till both devices are done)
    steps.append((start, clock(), {d: list(log[d]) for d in devices}))
  med = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
  print(f"batch {data_parallel.BS}, {STEPS} steps: {med([end - start for start, end, _ in steps]):.1f} ms per step")
  for d in devices:
    rows = [(start, launches[d]) for start, _, launches in steps]
    def total(what: str, wait: bool = False) -> float:
      return med([sum(w if wait else done - got - w for _, got, done, k, w in ls if k == what) for _, ls in rows])
    first = med([ls[0][1] - start for start, ls in rows])
    idle = med([sum(got - asked for asked, got, *_ in ls[1:]) for _, ls in rows])
    python = med([sum(b[0] - a[2] for a, b in zip(ls, ls[1:])) for _, ls in rows])
    exchanges = [[w for *_, k, w in ls if k == "receive"] for _, ls in rows]
    per_exchange = [statistics.median(ws) for ws in zip(*exchanges)]
    print(f"{d}: first launch at {first:.2f} ms; kernels {total('kernel'):.1f} ms, receives {total('receive'):.2f} + "
          f"{total('receive', True):.2f} waiting, sends {total('send'):.2f} + {total('send', True):.2f} waiting, other "
          f"{total('other'):.2f}; waiting for work {idle:.2f}, Python between launches {python:.2f}; "
          f"{len(per_exchange)} receives, their median waits summed {sum(per_exchange) * 1e3:.2f} ms")

if __name__ == "__main__": main()
