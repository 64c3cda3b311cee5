// worker/fault_injection.h
//
// Test-only fault injection of the worker (flag --fault_injection): SIGUSR1
// makes the worker stop answering its Steps stream — the hang a step
// deadline must catch — while the process and its health service stay up.
// Without the flag nothing is installed and SIGUSR1 keeps its default
// action.
//
// Thread safety: InstallStallSignal once from main(); StallRequested from
// any thread (an atomic set by the async-signal-safe handler).

#ifndef WEIR_WORKER_FAULT_INJECTION_H_
#define WEIR_WORKER_FAULT_INJECTION_H_

namespace weir::worker {

// Installs the SIGUSR1 handler that sets the stall request.
void InstallStallSignal();

// True once SIGUSR1 has arrived after InstallStallSignal.
bool StallRequested();

}  // namespace weir::worker

#endif  // WEIR_WORKER_FAULT_INJECTION_H_
