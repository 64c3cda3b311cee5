#include "base/signals.h"

#include <semaphore.h>
#include <signal.h>

#include <atomic>
#include <thread>

namespace weir {
namespace {

sem_t g_signal_semaphore;
std::atomic<int> g_last_signal{0};

// Runs on whichever thread the kernel picks; only async-signal-safe calls.
void OnTerminationSignal(int signo) {
  g_last_signal.store(signo, std::memory_order_relaxed);
  sem_post(&g_signal_semaphore);
}

}  // namespace

void InstallTerminationHandler(std::function<void(int signo, int count)> on_signal) {
  sem_init(&g_signal_semaphore, /*pshared=*/0, /*value=*/0);
  std::thread([on_signal = std::move(on_signal)]() {
    int count = 0;
    while (true) {
      if (sem_wait(&g_signal_semaphore) != 0) continue;  // EINTR
      on_signal(g_last_signal.load(std::memory_order_relaxed), ++count);
    }
  }).detach();
  struct sigaction action = {};
  action.sa_handler = OnTerminationSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

void ResetSignalsInChild() {
  for (int signo = 1; signo < NSIG; ++signo) {
    if (signo == SIGKILL || signo == SIGSTOP) continue;
    signal(signo, SIG_DFL);
  }
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
}

}  // namespace weir
