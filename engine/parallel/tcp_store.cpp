// tcp_store.cpp — the rendezvous store over TCP (tcp_store.h).
#include "engine/parallel/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "engine/parallel/communicator.h"

namespace oomlab {
namespace {
using Clock = std::chrono::steady_clock;

std::string where(const std::string& host, int port) { return str_cat(host, ":", port); }

void send_all(int fd, const void* data, size_t n, const char* what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw CommError(str_cat("tcp store: sending ", what, " failed: ", std::strerror(errno)));
    p += k;
    n -= size_t(k);
  }
}

void recv_all(int fd, void* data, size_t n, const char* what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) throw CommError(str_cat("tcp store: the server closed the connection while reading ", what));
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        throw CommTimeoutError(str_cat("tcp store: no answer from the server while reading ", what));
      throw CommError(str_cat("tcp store: reading ", what, " failed: ", std::strerror(errno)));
    }
    p += k;
    n -= size_t(k);
  }
}

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(passive ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw CommError(str_cat("tcp store: cannot resolve ", where(host, port), ": ", gai_strerror(rc)));
  return res;
}

// A server connection's pending request bytes and the answers not yet sent; complete
// requests are answered in order.
struct Peer {
  int fd;
  std::string in, out;
  bool greeted = false;   // its handshake came: other requests are served only after it
};

// Past this many unsent answer bytes a peer's requests wait until it reads.
constexpr size_t kMaxPendingAnswerBytes = size_t(16) << 20;

enum class Parsed { incomplete, answered, refused };

uint32_t u32_at(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Parses one complete request at the front of p.in and appends its answer to `out`. A
// peer's first request must be the handshake, of `job`; a wrong magic, an unknown op or a
// length past the limits refuses the peer (it is not an oomlab rank: its connection is
// closed), and so does another job, told which job this store serves.
Parsed handle(Peer& p, const std::string& job, std::map<std::string, std::vector<char>>& kv, std::string& out) {
  std::string& in = p.in;
  if (in.size() < 5) return Parsed::incomplete;
  const char op = in[0];
  if (!p.greeted) {
    if (op != 'H' || u32_at(in.data() + 1) != TcpStore::kMagic) return Parsed::refused;
    if (in.size() < 9) return Parsed::incomplete;
    const size_t jlen = u32_at(in.data() + 5);
    if (jlen > TcpStore::kMaxKeyBytes) return Parsed::refused;
    if (in.size() < 9 + jlen) return Parsed::incomplete;
    const bool same_job = in.compare(9, jlen, job) == 0;
    out.push_back(same_job ? 'h' : 'x');
    put_u32(out, TcpStore::kMagic);
    if (!same_job) {
      put_u32(out, uint32_t(job.size()));
      out += job;
      return Parsed::refused;
    }
    p.greeted = true;
    in.erase(0, 9 + jlen);
    return Parsed::answered;
  }
  const size_t klen = u32_at(in.data() + 1);
  if ((op != 'S' && op != 'G') || klen > TcpStore::kMaxKeyBytes) return Parsed::refused;
  if (in.size() < 5 + klen) return Parsed::incomplete;
  const std::string key = in.substr(5, klen);
  size_t used = 5 + klen;
  if (op == 'S') {
    if (in.size() < used + 4) return Parsed::incomplete;
    const size_t vlen = u32_at(in.data() + used);
    if (vlen > TcpStore::kMaxValueBytes) return Parsed::refused;
    if (in.size() < used + 4 + vlen) return Parsed::incomplete;
    kv[key] = std::vector<char>(in.begin() + long(used + 4), in.begin() + long(used + 4 + vlen));
    used += 4 + vlen;
    out.push_back('k');
  } else {   // 'G'
    auto it = kv.find(key);
    out.push_back(it == kv.end() ? 0 : 1);
    if (it != kv.end()) {
      put_u32(out, uint32_t(it->second.size()));
      out.append(it->second.begin(), it->second.end());
    }
  }
  in.erase(0, used);
  return Parsed::answered;
}

// Sends what the socket takes of p.out now, never blocking; false when the connection broke.
bool flush(Peer& p) {
  while (!p.out.empty()) {
    const ssize_t k = ::send(p.fd, p.out.data(), p.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (k <= 0) return false;
    p.out.erase(0, size_t(k));
  }
  return true;
}

// One poll event of a peer: sends pending answers, reads its bytes, answers the complete
// requests while its unsent answers stay under the bound. False: it closed, broke or was refused.
bool serve_peer(Peer& p, short revents, const std::string& job, std::map<std::string, std::vector<char>>& kv) {
  if ((revents & POLLOUT) && !flush(p)) return false;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    char buf[65536];
    const ssize_t k = ::recv(p.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) return false;
    if (k > 0) p.in.append(buf, size_t(k));
  }
  Parsed r = Parsed::incomplete;
  while (p.out.size() < kMaxPendingAnswerBytes && (r = handle(p, job, kv, p.out)) == Parsed::answered) {}
  if (r == Parsed::refused) {
    flush(p);   // what the refusal says (another job's), when the socket takes it at once
    return false;
  }
  return flush(p);
}

std::string hex_bytes(const char* p, size_t n) {
  std::string s;
  char buf[4];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", unsigned(static_cast<unsigned char>(p[i])));
    s += buf;
  }
  return s;
}
}  // namespace

TcpStore::TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout,
                   std::string job)
    : host_(host), port_(port), job_(std::move(job)), timeout_(timeout) {
  check_sizes(job_, 0);
  ::freeaddrinfo(resolve(host_, port_, false));   // an unresolvable master fails before any thread starts
  if (is_server) {
    addrinfo* res = resolve(host, port, true);
    int err = 0;
    for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd_ = fd;
      } else {
        err = errno;
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (listen_fd_ < 0)
      throw CommError(str_cat("tcp store: rank 0 cannot listen on port ", port, ": ", std::strerror(err),
                              " (another job on MASTER_PORT? pick another port)"));
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
    if (::pipe2(wake_fds_, O_CLOEXEC) != 0) throw CommError("tcp store: pipe2 failed");
    server_ = std::thread([this] { serve(); });
  }
  const auto deadline = Clock::now() + timeout;
  try {
    connect_client(deadline);
  } catch (...) {
    shutdown();   // the server thread is joined before the constructor throws (never std::terminate)
    throw;
  }
}

// Connects to the server, retrying every 50 ms until `deadline`; CommTimeoutError after it.
void TcpStore::connect_client(Clock::time_point deadline) {
  std::string last_error = "no address";
  while (client_fd_ < 0) {
    addrinfo* res = resolve(host_, port_, false);
    for (addrinfo* a = res; a && client_fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        client_fd_ = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (client_fd_ >= 0) break;
    if (Clock::now() > deadline)
      throw CommTimeoutError(str_cat("tcp store: no server at MASTER_ADDR:MASTER_PORT = ", where(host_, port_),
                                     " after ", std::chrono::duration<double>(timeout_).count(), " s (", last_error,
                                     "); is rank 0 running?"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int one = 1;
  ::setsockopt(client_fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{long(timeout_.count() / 1000), long(timeout_.count() % 1000) * 1000};
  ::setsockopt(client_fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(client_fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  greet();
}

// The handshake: whatever listens on MASTER_PORT must answer it as oomlab's rank 0 does.
void TcpStore::greet() {
  std::string req(1, 'H');
  put_u32(req, kMagic);
  put_u32(req, uint32_t(job_.size()));
  req += job_;
  const std::string what = str_cat("the handshake of the store at ", where(host_, port_),
                                   " (is oomlab's rank 0 listening on MASTER_PORT?)");
  send_all(client_fd_, req.data(), req.size(), what.c_str());
  char answer[5] = {};
  recv_all(client_fd_, answer, sizeof answer, what.c_str());
  if ((answer[0] != 'h' && answer[0] != 'x') || u32_at(answer + 1) != kMagic)
    throw CommError(str_cat("tcp store: the server at MASTER_ADDR:MASTER_PORT = ", where(host_, port_),
                            " is not oomlab's rendezvous store (it answered the handshake with bytes ",
                            hex_bytes(answer, sizeof answer), "); another service on that port?"));
  if (answer[0] == 'h') return;
  uint32_t len = 0;
  recv_all(client_fd_, &len, 4, what.c_str());
  if (len > kMaxKeyBytes) protocol_error(str_cat("the handshake's refusal announced a job of ", len, " bytes"));
  std::string theirs(len, '\0');
  if (len) recv_all(client_fd_, theirs.data(), len, what.c_str());
  throw CommError(str_cat("tcp store: the store at MASTER_ADDR:MASTER_PORT = ", where(host_, port_),
                          " serves another job (", theirs, "; this rank's: ", job_,
                          "): two jobs on one MASTER_PORT? give each its own port (--master-port)"));
}

// A reply that oomlab's store would never send: the connection is not to be trusted further.
[[noreturn]] void TcpStore::protocol_error(const std::string& what) const {
  throw CommError(str_cat("tcp store ", where(host_, port_), ": ", what, " (not oomlab's store protocol)"));
}

TcpStore::~TcpStore() { shutdown(); }

void TcpStore::shutdown() {
  if (client_fd_ >= 0) ::close(client_fd_);
  client_fd_ = -1;
  if (server_.joinable()) {
    const char c = 'q';
    (void)!::write(wake_fds_[1], &c, 1);
    server_.join();
  }
  for (int* fd : {&listen_fd_, &wake_fds_[0], &wake_fds_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void TcpStore::serve() {
  std::map<std::string, std::vector<char>> kv;
  std::vector<Peer> peers;
  for (;;) {
    std::vector<pollfd> fds = {{wake_fds_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Peer& p : peers)   // a peer that does not read its answers is not read either
      fds.push_back({p.fd, short((p.out.size() < kMaxPendingAnswerBytes ? POLLIN : 0) |
                                 (p.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        const int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        peers.push_back({fd, {}, {}});
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      Peer& p = peers[i - 2];
      if (fds[i].revents && !serve_peer(p, fds[i].revents, job_, kv)) {   // closed, broken or refused:
        ::close(p.fd);                                                // forget it, keep its keys
        p.fd = -1;
      }
    }
    std::erase_if(peers, [](const Peer& p) { return p.fd < 0; });
  }
  for (const Peer& p : peers) ::close(p.fd);
}

void TcpStore::check_sizes(const std::string& key, size_t value_bytes) const {
  if (key.size() > kMaxKeyBytes || value_bytes > kMaxValueBytes)
    throw CommError(str_cat("tcp store: key '", key.substr(0, 64), "' (", key.size(), " bytes) or its value (",
                            value_bytes, " bytes) is past the store's limits (", kMaxKeyBytes, " and ",
                            kMaxValueBytes, " bytes)"));
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  check_sizes(key, value.size());
  std::string req(1, 'S');
  put_u32(req, uint32_t(key.size()));
  req += key;
  put_u32(req, uint32_t(value.size()));
  req.append(value.begin(), value.end());
  send_all(client_fd_, req.data(), req.size(), "a set");
  char ack = 0;
  recv_all(client_fd_, &ack, 1, str_cat("the answer to set(", key, ")").c_str());
  if (ack != 'k') protocol_error(str_cat("set(", key, ") was answered with byte ", hex_bytes(&ack, 1)));
}

bool TcpStore::try_get(const std::string& key, std::vector<char>* value) {
  check_sizes(key, 0);
  std::string req(1, 'G');
  put_u32(req, uint32_t(key.size()));
  req += key;
  send_all(client_fd_, req.data(), req.size(), "a get");
  char found = 0;
  recv_all(client_fd_, &found, 1, "a get's answer");
  if (found != 0 && found != 1) protocol_error(str_cat("get(", key, ") was answered with byte ", hex_bytes(&found, 1)));
  if (!found) return false;
  uint32_t len = 0;
  recv_all(client_fd_, &len, 4, "a value's length");
  if (len > kMaxValueBytes) protocol_error(str_cat("get(", key, ") announced a value of ", len, " bytes"));
  value->resize(len);
  if (len) recv_all(client_fd_, value->data(), len, "a value");
  return true;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto t0 = Clock::now();
  std::vector<char> ignored;
  for (const std::string& key : keys) {
    auto pause = std::chrono::milliseconds(1);
    while (!try_get(key, &ignored)) {
      if (Clock::now() - t0 > timeout)
        throw CommTimeoutError(str_cat("tcp store ", where(host_, port_), ": key '", key, "' not set after ",
                                       std::chrono::duration<double>(timeout).count(), " s (a rank did not arrive)"));
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
}

std::vector<char> TcpStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::vector<char> v;
  try_get(key, &v);
  return v;
}

}  // namespace oomlab
