#include "worker/fault_injection.h"

#include <signal.h>

#include <atomic>
#include <cstring>

namespace weir::worker {
namespace {

std::atomic<bool> stall_requested{false};

void OnStallSignal(int) { stall_requested.store(true); }

}  // namespace

void InstallStallSignal() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnStallSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
}

bool StallRequested() { return stall_requested.load(); }

}  // namespace weir::worker
