// fuzz_tcp_store.cpp — libFuzzer target for the rendezvous store's wire protocol
// (engine/parallel/tcp_store.h), both ways, over real loopback sockets:
//   first byte even: the rest is what a stranger sends to rank 0's store (then it hangs up);
//   first byte odd: the rest is what a foreign service on MASTER_PORT answers a rank's client
//     (then it hangs up), while the client connects, sets a key and gets it.
// Expected rejections: oomlab::Error (CommError naming the address). Findings: any other
// exception, a sanitizer report (the server thread included; an allocation of a garbage
// length trips -malloc_limit_mb), or a broken property: the store keeps serving its ranks (a
// client's set/get round trip after every stranger), and a stranger's connection ends when
// the stranger hangs up (the server closes it: no connection is kept, no request waits).
// The store's job and the client's are "" (a stranger naming another job is refused).
// Seeds: tests/fuzz/corpus/fuzz_tcp_store/; dictionary: tests/fuzz/fuzz_tcp_store.dict.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/parallel/tcp_store.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/loopback_util.h"

using oomlab_fuzz::fuzz_require;
using namespace std::chrono_literals;

namespace {
int connect_to(int port) {
  const int fd = oomlab_test::loopback_connect(port, 2);
  fuzz_require(fd >= 0, "cannot reach the store");
  return fd;
}

// Reads until the peer closes; false when it is still open after the 2 s receive timeout.
bool drained(int fd) { return oomlab_test::read_until_closed(fd); }

// The store is made anew every 4096 inputs: the keys strangers set stay bounded.
void stranger_to_store(const std::string& bytes) {
  static std::unique_ptr<oomlab::TcpStore> store, rank;
  static int runs = 0;
  if (runs++ % 4096 == 0) {
    rank.reset();
    store = std::make_unique<oomlab::TcpStore>("127.0.0.1", 0, true, 5s);
    rank = std::make_unique<oomlab::TcpStore>("127.0.0.1", store->port(), false, 5s);
  }
  const int fd = connect_to(store->port());
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  fuzz_require(drained(fd), "the store kept a stranger's connection after it hung up");
  ::close(fd);
  rank->set("probe", {'o', 'k'});
  fuzz_require(store->get("probe") == std::vector<char>{'o', 'k'}, "the store stopped serving its ranks");
}

// A foreign service on MASTER_PORT: answers each connection with the current bytes, hangs up.
class ForeignService {
 public:
  ForeignService() {
    listen_fd_ = oomlab_test::loopback_listen(&port_);
    fuzz_require(listen_fd_ >= 0, "cannot listen on a loopback port");
    std::thread([this] { serve(); }).detach();   // lives as long as the process
  }
  int port() const { return port_; }
  void answer_with(std::string bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    answer_ = std::move(bytes);
  }

 private:
  void serve() {
    for (;;) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::string bytes;
      {
        std::lock_guard<std::mutex> lock(mu_);
        bytes = answer_;
      }
      (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      ::shutdown(fd, SHUT_WR);
      timeval tv{2, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      drained(fd);   // until the client hangs up
      ::close(fd);
    }
  }
  int listen_fd_ = -1, port_ = 0;
  std::mutex mu_;
  std::string answer_;
};

void foreign_service_to_client(const std::string& bytes) {
  static ForeignService service;
  service.answer_with(bytes);
  try {
    oomlab::TcpStore client("127.0.0.1", service.port(), false, 2s);
    client.set("k", {'v'});
    (void)client.get("k");
  } catch (const oomlab::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0)
    stranger_to_store(bytes);
  else
    foreign_service_to_client(bytes);
  return 0;
}
