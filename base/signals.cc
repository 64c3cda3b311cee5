#include "base/signals.h"

#include <pthread.h>
#include <signal.h>

#include <thread>

namespace weir {

void InstallTerminationHandler(std::function<void(int signo, int count)> on_signal) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, on_signal = std::move(on_signal)]() {
    int count = 0;
    while (true) {
      int signo = 0;
      if (sigwait(&set, &signo) != 0) continue;
      on_signal(signo, ++count);
    }
  }).detach();
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
