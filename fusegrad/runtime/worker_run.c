/* What a CPU device's worker thread (ops_cpu.Worker) runs in C, called through ctypes (which lets go of the GIL):
   fg_run, the kernels and copies the worker finds queued in a row (a TinyJit replay's part on its device: 100-300
   launches) in one call, so it takes the GIL neither between kernels nor while it waits for another device's copy (the
   host, which holds the GIL while it queues, and the other workers don't hold it up); and the two halves of a copy
   between two workers (fg_send, fg_receive). Built by the device's compiler (ops_cpu._worker_lib). */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
/* a copy's two flags, full (the staging buffer holds src) and free (the destination read it), under one lock */
typedef struct { pthread_mutex_t mu; pthread_cond_t cv; int full, free_; } pair;
int fg_size(void) { return sizeof(pair); }
void fg_init(pair *p) { pthread_mutex_init(&p->mu, 0), pthread_cond_init(&p->cv, 0), p->full = 0, p->free_ = 1; }
int fg_full(pair *p) { return __atomic_load_n(&p->full, __ATOMIC_ACQUIRE); }  /* (for tests) */
static long ns(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec; }
/* wait for a flag and lower it: spinning first (yielding the core), up to 1 ms (CPU_SPIN's default, as OpenMP's threads
   spin between kernels), since the other device's copy is often microseconds away and waking a sleeping thread costs
   20-100 us in a VM */
static void take(pair *p, int *flag) {
  for (long t = ns(); !__atomic_load_n(flag, __ATOMIC_ACQUIRE) && ns() - t < 1000000;) sched_yield();
  pthread_mutex_lock(&p->mu);
  while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) pthread_cond_wait(&p->cv, &p->mu);
  __atomic_store_n(flag, 0, __ATOMIC_RELEASE), pthread_mutex_unlock(&p->mu);
}
static void give(pair *p, int *flag) {
  pthread_mutex_lock(&p->mu);
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE), pthread_cond_broadcast(&p->cv), pthread_mutex_unlock(&p->mu);
}
/* the source's half: into the staging buffer once the destination read the last copy (no staging buffer: the
   destination reads src itself, which stays as it is till then) */
void fg_send(pair *p, char *staging, const char *src, size_t n) {
  take(p, &p->free_);
  if (staging) memcpy(staging, src, n);
  give(p, &p->full);
  if (!staging) take(p, &p->free_), give(p, &p->free_);
}
void fg_receive(pair *p, char *dest, const char *src, size_t n) {
  take(p, &p->full), memcpy(dest, src, n), give(p, &p->free_);
}
/* launches: (function, argument count (at most 16), arguments...) one after another, 64-bit words (ops_cpu._words) */
typedef void *P;
void fg_run(const int64_t *w, int words) {
  for (int i = 0; i < words; i += 2 + (int)w[i + 1]) {
    void *f = (void *)(intptr_t)w[i];
    P a[16];
    for (int k = 0; k < w[i + 1]; k++) a[k] = (P)(intptr_t)w[i + 2 + k];
    switch (w[i + 1]) {
      case 0: ((void (*)(void))f)(); break;
      case 1: ((void (*)(P))f)(a[0]); break;
      case 2: ((void (*)(P, P))f)(a[0], a[1]); break;
      case 3: ((void (*)(P, P, P))f)(a[0], a[1], a[2]); break;
      case 4: ((void (*)(P, P, P, P))f)(a[0], a[1], a[2], a[3]); break;
      case 5: ((void (*)(P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4]); break;
      case 6: ((void (*)(P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5]); break;
      case 7: ((void (*)(P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
      case 8: ((void (*)(P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
      case 9: ((void (*)(P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]); break;
      case 10: ((void (*)(P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]);
        break;
      case 11: ((void (*)(P, P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                                             a[9], a[10]); break;
      case 12: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                                                                a[9], a[10], a[11]); break;
      case 13: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                                                   a[8], a[9], a[10], a[11], a[12]); break;
      case 14: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                                                      a[8], a[9], a[10], a[11], a[12], a[13]); break;
      case 15: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                                                         a[7], a[8], a[9], a[10], a[11], a[12], a[13],
                                                                         a[14]); break;
      default: ((void (*)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P))f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                                                             a[7], a[8], a[9], a[10], a[11], a[12],
                                                                             a[13], a[14], a[15]);
    }
  }
}
