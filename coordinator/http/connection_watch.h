// coordinator/http/connection_watch.h
//
// ConnectionWatch tells a request handler whether its HTTP client has gone
// away, so a generation nobody will read is cancelled. cpp-httplib 0.11 does
// not hand the connection's socket to handlers (later versions have
// Request::is_connection_closed), so the watch finds it once by its TCP
// 4-tuple among this process's descriptors and then polls it for a hang-up.
//
// Thread safety: one watch per request, used by the request's thread only.

#ifndef WEIR_COORDINATOR_HTTP_CONNECTION_WATCH_H_
#define WEIR_COORDINATOR_HTTP_CONNECTION_WATCH_H_

#include <string>

namespace weir::coordinator::http {

class ConnectionWatch {
 public:
  // Finds the socket whose local port is `local_port` and whose peer is
  // `remote_addr`:`remote_port` (as cpp-httplib reports them). If none is
  // found, the watch never reports a closed peer.
  ConnectionWatch(int local_port, const std::string& remote_addr, int remote_port);

  // Returns true once the peer closed or reset the connection. Does not
  // consume any bytes the peer sent (a pipelined next request stays queued).
  bool PeerClosed() const;

  // True if the connection's socket was found.
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace weir::coordinator::http

#endif  // WEIR_COORDINATOR_HTTP_CONNECTION_WATCH_H_
