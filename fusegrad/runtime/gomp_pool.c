/* gcc's OpenMP entry points where libomp isn't installed, in place of libgomp's: its idle workers either sleep at once
   (woken per kernel, 20-100 us in this VM, so a region's halves run one after the other: a 512 matmul at 1 thread's
   speed) or spin without yielding (a region stalled a time slice when the cores are busy), and a forked child's first
   region hung (the parent's workers don't exist there). These spin CPU_SPIN ms, yielding, then sleep, as libomp's do;
   every worker takes every region (those past its team size do nothing), a region running elsewhere makes it serial.
   Built by the CPU device's gcc where libomp isn't installed (ops_cpu._one_openmp_runtime). */
#include <pthread.h>
#include <sched.h>
#include <time.h>
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER, mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static void (*job)(void *); static void *arg; static unsigned gen; static int workers, team, sleepers, pending;
static __thread int me, size = 1;
long fg_spin_ns = 1000000;
int omp_get_thread_num(void) { return me; }
int omp_get_num_threads(void) { return size; }
static long ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
static void *work(void *a) {
  int id = (int)((long)a & 0xffff); unsigned seen = (unsigned)((long)a >> 16);
  for (;; seen++, __atomic_sub_fetch(&pending, 1, __ATOMIC_RELEASE)) {
    for (long t = ns(); __atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen && ns() - t < fg_spin_ns;) sched_yield();
    pthread_mutex_lock(&mu);
    for (sleepers++; __atomic_load_n(&gen, __ATOMIC_ACQUIRE) == seen;) pthread_cond_wait(&cv, &mu);
    sleepers--, pthread_mutex_unlock(&mu);
    if (id < team) me = id, size = team, job(arg);
  }
}
void GOMP_parallel(void (*fn)(void *), void *data, unsigned n, unsigned flags) {
  int m = me, s = size;
  if (n < 2 || n > 256 || pthread_mutex_trylock(&busy)) { me = 0, size = 1, fn(data), me = m, size = s; return; }
  for (pthread_t t; workers < (int)n - 1 && !pthread_create(&t, 0, work, (void *)((long)gen << 16 | (workers + 1)));)
    pthread_detach(t), workers++;
  job = fn, arg = data, team = (int)n < workers + 1 ? (int)n : workers + 1, pending = workers;
  __atomic_add_fetch(&gen, 1, __ATOMIC_RELEASE);
  pthread_mutex_lock(&mu), sleepers ? pthread_cond_broadcast(&cv) : 0, pthread_mutex_unlock(&mu);
  me = 0, size = team, fn(data), size = 1;
  while (__atomic_load_n(&pending, __ATOMIC_ACQUIRE)) sched_yield();
  pthread_mutex_unlock(&busy);
}
static void forked(void) {
  workers = sleepers = pending = 0, pthread_mutex_init(&busy, 0), pthread_mutex_init(&mu, 0), pthread_cond_init(&cv, 0);
}
__attribute__((constructor)) static void init(void) { pthread_atfork(0, 0, forked); }
