// loopback_util.h — raw TCP sockets on 127.0.0.1 for the rendezvous store's tests and fuzz
// target (a stranger connecting to the store, a foreign service the store's client reaches):
//  * loopback_listen: a listening socket on a free port (the port written to *port), -1 on failure;
//  * loopback_connect: a connection to `port` with a receive timeout of `timeout_s`, -1 on failure;
//  * read_until_closed: reads until the peer closes; false on the timeout or an error.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>

namespace oomlab_test {

inline sockaddr_in loopback_address(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

inline int loopback_listen(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback_address(0);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

inline int loopback_connect(int port, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in a = loopback_address(port);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

inline bool read_until_closed(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t k = ::recv(fd, buf, sizeof buf, 0);
    if (k == 0) return true;
    if (k < 0) return false;
  }
}

}  // namespace oomlab_test
