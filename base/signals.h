// base/signals.h
//
// Termination signals (SIGINT, SIGTERM) handled on one dedicated thread, and
// the matching reset for child processes. The signal handler itself only
// posts a semaphore (async-signal-safe), so it does not matter which thread
// the kernel delivers the signal to (libraries such as UCX start threads with
// their own signal masks).
//
// Thread safety: call InstallTerminationHandler once, from main(), after
// InitProcess (whose failure signal handler would otherwise take SIGTERM).

#ifndef WEIR_BASE_SIGNALS_H_
#define WEIR_BASE_SIGNALS_H_

#include <functional>

namespace weir {

// Installs handlers for SIGINT and SIGTERM and starts a detached thread that
// calls `on_signal(signo, count)` for each one, where `count` is 1 for the
// first termination signal, 2 for the second, ...
void InstallTerminationHandler(std::function<void(int signo, int count)> on_signal);

// Unblocks every signal and restores default dispositions. Async-signal-safe:
// for use in a forked child before exec.
void ResetSignalsInChild();

}  // namespace weir

#endif  // WEIR_BASE_SIGNALS_H_
