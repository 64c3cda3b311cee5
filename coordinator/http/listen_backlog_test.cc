#include "coordinator/http/listen_backlog.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace weir::coordinator::http {
namespace {

// A loopback socket listening with `backlog`; returns its fd and sets `port`.
int Listen(int backlog, int& port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, backlog), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return fd;
}

// Starts `n` connects to `port` without waiting, lets the handshakes finish,
// and returns how many the listening socket `listener` then accepts at once:
// those that found room in its accept queue.
int Burst(int listener, int port, int n, std::vector<int>& clients) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  for (int i = 0; i < n; ++i) {
    const int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    clients.push_back(c);
  }
  absl::SleepFor(absl::Milliseconds(300));
  fcntl(listener, F_SETFL, fcntl(listener, F_GETFL) | O_NONBLOCK);
  int accepted = 0;
  for (int s; (s = accept(listener, nullptr, nullptr)) >= 0;) {
    ++accepted;
    close(s);
  }
  return accepted;
}

TEST(ListenBacklogTest, ABurstFitsTheRaisedQueue) {
  constexpr int kBurst = 48;
  int small_port = 0, raised_port = 0;
  const int small = Listen(2, small_port);
  const int raised = Listen(2, raised_port);
  ASSERT_TRUE(RaiseListenBacklog(raised_port, 256).ok());
  std::vector<int> clients;
  // The queue of 2 holds at most 3 (Linux admits backlog + 1); the raised one all.
  EXPECT_LE(Burst(small, small_port, kBurst, clients), 3);
  EXPECT_EQ(Burst(raised, raised_port, kBurst, clients), kBurst);
  for (int c : clients) close(c);
  close(small);
  close(raised);
}

TEST(ListenBacklogTest, NoListeningSocketIsNotFound) {
  int port = 0;
  const int fd = Listen(1, port);
  close(fd);
  EXPECT_EQ(RaiseListenBacklog(port, 64).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace weir::coordinator::http
