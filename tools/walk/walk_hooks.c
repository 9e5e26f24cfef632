/* The probes of tools/stop_walk.py (issue 54's walk counts), preloaded into a Python that imports
 * an extension built with -finstrument-functions: every function of ours entered on the walking
 * thread while the walk is on, and every mutex our code locks there. Nothing here is linked into
 * the product. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_EVENTS (1 << 22)

static volatile int walk_on;
static pthread_t walk_thread;
static void* entered[MAX_EVENTS];
static size_t n_entered;
static void* lockers[MAX_EVENTS];
static size_t n_locks;
static int (*real_lock)(pthread_mutex_t*);

__attribute__((constructor)) static void find_real_lock(void) {
  real_lock = (int (*)(pthread_mutex_t*))dlsym(RTLD_NEXT, "pthread_mutex_lock");
}

static int walking(void) {
  return walk_on && pthread_equal(pthread_self(), walk_thread);
}

void walk_begin(void) {
  n_entered = 0;
  n_locks = 0;
  walk_thread = pthread_self();
  walk_on = 1;
}

void walk_end(void) {
  walk_on = 0;
}

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void* fn, void* site) {
  (void)site;
  if (walking() && n_entered < MAX_EVENTS) entered[n_entered++] = fn;
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void* fn, void* site) {
  (void)fn;
  (void)site;
}

int pthread_mutex_lock(pthread_mutex_t* m) {
  if (walking() && n_locks < MAX_EVENTS) lockers[n_locks++] = __builtin_return_address(0);
  return real_lock ? real_lock(m) : 0; /* 0: before the constructor, one thread only */
}

/* Writes "enter|lock <library> <offset>" lines, in order, for the addresses in libraries whose
 * path holds `library_part`. Returns the number of lines written, -1 when the file fails. */
static long write_events(FILE* out, const char* kind, void** addresses, size_t n,
                         const char* library_part) {
  long written = 0;
  for (size_t i = 0; i < n; ++i) {
    Dl_info info;
    if (!dladdr(addresses[i], &info) || !info.dli_fname || !strstr(info.dli_fname, library_part))
      continue;
    fprintf(out, "%s %s %lx\n", kind, info.dli_fname,
            (unsigned long)((uintptr_t)addresses[i] - (uintptr_t)info.dli_fbase));
    ++written;
  }
  return written;
}

long walk_write(const char* path, const char* library_part) {
  FILE* out = fopen(path, "w");
  if (!out) return -1;
  long n = write_events(out, "enter", entered, n_entered, library_part);
  n += write_events(out, "lock", lockers, n_locks, library_part);
  fclose(out);
  return n;
}
