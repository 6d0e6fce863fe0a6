"""Where the workers of two one-thread CPU devices spend a data-parallel MNIST step (bench/data_parallel.py's step).
Each worker takes from its queue what was queued in a row and runs the kernels and copies among it in one call of C
(runtime/worker_run.c, fg_run: no GIL between them); its loop is wrapped, and per step and worker the medians are
printed: when its first run started after the call, the time in C runs (kernels and copies, with the waits for the
other device inside), in Python launches (e.g. a sync's), waiting for work (the queue empty), in Python between runs,
and how many runs a step took.

  python bench/worker_trace.py              # BS=128, STEPS=40
  PER_LAUNCH=1 python bench/worker_trace.py # each launch run and timed on its own from Python (the old worker loop:
                                            # the GIL taken between kernels), split into kernels, sends and receives
Busy machines make waits of other sessions' making: run it at a priority over them (e.g. `chrt -f 1`), or compare
runs made in the same minutes."""
import ctypes, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fusegrad import Device, Context
from fusegrad.helpers import getenv
from fusegrad.runtime import ops_cpu
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data_parallel

STEPS, PER_LAUNCH = getenv("STEPS", 40), getenv("PER_LAUNCH", 0)
clock = time.perf_counter
log: dict[str, list[tuple]] = {}  # device -> (asked, got, done, what, launches) per item run

def _loop(self) -> None:
  """Worker._loop, each item it runs (a C run of launches in a row, or a Python launch) logged."""
  mine = log.setdefault(self.device, [])
  while True:
    asked = clock()
    launches = [self.queue.get()]
    got = clock()
    while launches[-1][3] and not self.queue.empty(): launches.append(self.queue.get())
    if (words := b"".join(launch[3] for launch in launches)):
      self.lib.dll.fg_run(words, len(words) // 8)
      mine.append((asked, got, clock(), "C run", len(launches) - (not launches[-1][3])))
      asked = got = clock()
    if not launches[-1][3]:
      fxn = launches[-1][0]
      try: fxn(*launches[-1][1])
      except BaseException as e: self.error = self.error or e
      dll = self.lib.dll
      what = "send" if fxn is dll.fg_send else "receive" if fxn is dll.fg_receive else "kernel" \
        if isinstance(fxn, ctypes._CFuncPtr) else "Python"  # (a copy within the device, memmove: with the kernels)
      mine.append((asked, got, clock(), what, 1))
    del launches

def main() -> None:
  ops_cpu.Worker._loop = _loop  # (before the workers)
  if PER_LAUNCH: ops_cpu._words = lambda fxn, args: b""  # (bound launches have no C form: each runs on its own)
  with Context(CPU_THREADS=1): devices = tuple(Device[f"CPU:{i + 1}"].device for i in range(2))
  for d in devices:
    lib = Device[d].worker.lib.dll
    lib.fg_send.argtypes = lib.fg_receive.argtypes = [ctypes.c_void_p] * 4  # (called through ctypes: addresses)
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
    rows = [(start, items[d]) for start, _, items in steps]
    def total(what: str) -> float:
      return med([sum(done - got for _, got, done, k, _ in ls if k == what) for _, ls in rows])
    first = med([ls[0][1] - start for start, ls in rows])
    idle = med([sum(got - asked for asked, got, *_ in ls[1:]) for _, ls in rows])
    python = med([sum(b[0] - a[2] for a, b in zip(ls, ls[1:])) for _, ls in rows])
    runs = statistics.median([sum(k == "C run" for *_, k, _ in ls) for _, ls in rows])
    launches = statistics.median([sum(n for *_, n in ls) for _, ls in rows])
    kinds = ", ".join(f"{k} {total(k):.2f}" for k in ("C run", "kernel", "send", "receive", "Python")
                      if any(k == x[3] for _, ls in rows for x in ls))
    print(f"{d}: first launch at {first:.2f} ms; ms in: {kinds} (receives and sends with their waits); waiting for "
          f"work {idle:.2f}, Python between {python:.2f}; {launches:.0f} launches, {runs:.0f} C runs")

if __name__ == "__main__": main()
