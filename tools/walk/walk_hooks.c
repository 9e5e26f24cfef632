/* The probes of tools/stop_walk.py (issue 54's walk counts), preloaded into a Python that imports
 * an extension built with -finstrument-functions: every call into a function of ours made on the
 * walking thread while the walk is on (the function and its call site), and every mutex locked
 * there (with the calls that led to it). Nothing here is linked into the product. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_EVENTS (1 << 21)
#define LOCK_FRAMES 12

static volatile int walk_on;
static pthread_t walk_thread;
static void* functions[MAX_EVENTS];
static void* sites[MAX_EVENTS];
static size_t n_calls;
static void* lock_frames[1 << 14][LOCK_FRAMES];
static int lock_depth[1 << 14];
static size_t n_locks;
static __thread int in_probe;
static int (*real_lock)(pthread_mutex_t*);

__attribute__((constructor)) static void find_real_lock(void) {
  real_lock = (int (*)(pthread_mutex_t*))dlsym(RTLD_NEXT, "pthread_mutex_lock");
}

static int walking(void) {
  return walk_on && !in_probe && pthread_equal(pthread_self(), walk_thread);
}

void walk_begin(void) {
  n_calls = 0;
  n_locks = 0;
  walk_thread = pthread_self();
  walk_on = 1;
}

void walk_end(void) {
  walk_on = 0;
}

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void* fn, void* site) {
  if (walking() && n_calls < MAX_EVENTS) {
    functions[n_calls] = fn;
    sites[n_calls++] = site;
  }
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void* fn, void* site) {
  (void)fn;
  (void)site;
}

int pthread_mutex_lock(pthread_mutex_t* m) {
  if (walking() && n_locks < (1 << 14)) {
    in_probe = 1; /* backtrace() may lock on its first use */
    lock_depth[n_locks] = backtrace(lock_frames[n_locks], LOCK_FRAMES);
    ++n_locks;
    in_probe = 0;
  }
  return real_lock ? real_lock(m) : 0; /* 0: before the constructor, one thread only */
}

/* "<library> <offset>" of an address in a library whose path holds `part`, else "- 0". */
static void write_address(FILE* out, void* address, const char* part) {
  Dl_info info;
  if (dladdr(address, &info) && info.dli_fname && strstr(info.dli_fname, part)) {
    fprintf(out, " %s %lx", info.dli_fname,
            (unsigned long)((uintptr_t)address - (uintptr_t)info.dli_fbase));
  } else {
    fprintf(out, " - 0");
  }
}

/* Lines "call <function> <site>" and "lock <frame>...", in order. -1 when the file fails. */
long walk_write(const char* path, const char* part) {
  FILE* out = fopen(path, "w");
  if (!out) return -1;
  for (size_t i = 0; i < n_calls; ++i) {
    fprintf(out, "call");
    write_address(out, functions[i], part);
    write_address(out, sites[i], part);
    fprintf(out, "\n");
  }
  for (size_t i = 0; i < n_locks; ++i) {
    fprintf(out, "lock");
    for (int k = 1; k < lock_depth[i]; ++k) write_address(out, lock_frames[i][k], part);
    fprintf(out, "\n");
  }
  fclose(out);
  return (long)(n_calls + n_locks);
}
