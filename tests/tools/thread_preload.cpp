// A stand-in for ncu's and compute-sanitizer's injection libraries in what matters to the runner's
// confinement: preloaded (LD_PRELOAD), it starts a thread before the program's main, as theirs do
// (their front end then talks to that thread). A process like this cannot unshare(CLONE_NEWUSER).
#include <pthread.h>
#include <unistd.h>

namespace {

pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
bool g_started = false;

void* idle(void*) {
  pthread_mutex_lock(&g_mutex);
  g_started = true;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_mutex);
  for (;;) ::pause();
  return nullptr;
}

// Returns once the thread runs: main starts in a process with two threads.
__attribute__((constructor)) void start_thread() {
  pthread_t t;
  if (pthread_create(&t, nullptr, idle, nullptr) != 0) return;
  pthread_mutex_lock(&g_mutex);
  while (!g_started) pthread_cond_wait(&g_cond, &g_mutex);
  pthread_mutex_unlock(&g_mutex);
}

}  // namespace
