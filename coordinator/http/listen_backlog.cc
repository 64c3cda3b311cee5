#include "coordinator/http/listen_backlog.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace weir::coordinator::http {
namespace {

// True if `fd` is a listening TCP socket whose local port is `port`.
bool ListensOn(int fd, int port) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  int listening = 0;
  socklen_t size = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || listening == 0) {
    return false;
  }
  sockaddr_storage addr;
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port) == port;
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port) == port;
  }
  return false;
}

}  // namespace

absl::Status RaiseListenBacklog(int port, int backlog) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return absl::NotFoundError("cannot read /proc/self/fd");
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (ListensOn(static_cast<int>(fd), port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  if (found < 0) return absl::NotFoundError(absl::StrCat("no listening socket on port ", port));
  if (listen(found, backlog) != 0) {
    return absl::InternalError(absl::StrCat("listen(backlog ", backlog, ") on port ", port,
                                            ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace weir::coordinator::http
