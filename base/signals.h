// base/signals.h
//
// Termination signals (SIGINT, SIGTERM) delivered to one dedicated thread
// instead of interrupting arbitrary threads, and the matching reset for child
// processes.
//
// Thread safety: InstallTerminationHandler must be called from main() before
// any other thread starts (the signal mask is inherited by new threads).

#ifndef WEIR_BASE_SIGNALS_H_
#define WEIR_BASE_SIGNALS_H_

#include <functional>

namespace weir {

// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it
// starts later) and starts a detached thread that waits for them. Each signal
// calls `on_signal(signo, count)` on that thread, where `count` is 1 for the
// first termination signal, 2 for the second, ...
void InstallTerminationHandler(std::function<void(int signo, int count)> on_signal);

// Unblocks every signal and restores default dispositions. Async-signal-safe:
// for use in a forked child before exec.
void ResetSignalsInChild();

}  // namespace weir

#endif  // WEIR_BASE_SIGNALS_H_
