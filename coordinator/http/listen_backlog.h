// coordinator/http/listen_backlog.h
//
// RaiseListenBacklog enlarges the accept queue of a socket this process
// already listens on. cpp-httplib 0.11 listens with a backlog of 5
// (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built its shared library) and
// does not hand out its socket. With so short a queue a burst of connects (64
// clients starting at once) overflows it: Linux drops the handshakes it has
// no room for and answers with SYN cookies, and some of those connections are
// reset before the server reads a byte (the client sees a read error about a
// second in; `nstat` counts ListenOverflows and SyncookiesFailed). Calling
// listen() again on a listening socket only changes its backlog, so the HTTP
// server raises it right after binding, before it accepts anything.
//
// Thread safety: thread-compatible (scans /proc/self/fd; call once at start).

#ifndef WEIR_COORDINATOR_HTTP_LISTEN_BACKLOG_H_
#define WEIR_COORDINATOR_HTTP_LISTEN_BACKLOG_H_

#include "absl/status/status.h"

namespace weir::coordinator::http {

// Finds this process's listening TCP socket on local `port` and calls
// listen() on it again with `backlog` (the kernel caps it at
// net.core.somaxconn). NOT_FOUND if no listening socket has that port;
// INTERNAL if listen() fails.
absl::Status RaiseListenBacklog(int port, int backlog);

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_LISTEN_BACKLOG_H_
