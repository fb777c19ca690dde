// tcp_store.h — the rendezvous key-value store of process backends (PyTorch's TCPStore):
// rank 0 serves it on MASTER_ADDR:MASTER_PORT, every rank (rank 0 included) is a client.
// Ranks publish their connection details under keys (gloo's pair addresses, NCCL's unique
// id) and wait for the others'.
// Contracts:
//  * set(key, value) overwrites; get(key) blocks until the key exists or the timeout ends.
//  * Every wait is bounded: a server that cannot bind (port in use), a master that never
//    answers, a key that never comes all throw CommError / CommTimeoutError naming the
//    address, the key and the seconds waited. Never a hang. An unresolvable host is a
//    CommError before rank 0's server thread starts (never std::terminate).
//  * The server lives as long as rank 0's TcpStore; it answers its clients from one thread
//    (poll over every connection, answers sent without blocking), so a slow client never
//    blocks the others; one that does not read its answers is not read either once 16 MiB
//    of them wait.
//  * Only oomlab ranks are served (PyTorch's TCPStore validates its clients likewise): a
//    client's first request is the handshake, and a connection that opens with anything else
//    (an HTTP request, a port scan), or sends an unknown op or a length past the limits, is
//    closed; the other clients are served on. A client whose server does not answer the
//    handshake as oomlab's does (another service on MASTER_PORT) or that gets a reply the
//    protocol never sends is a CommError naming the address; no garbage length is ever
//    allocated.
//  * One job per store: the handshake carries the client's job (rank_env.h's
//    rendezvous_job: world size and the launcher's run id), and a client of another job
//    (a second job started on the same MASTER_PORT) is told the store's job and refused: a
//    CommError naming both, before it can read or overwrite a key of the first job.
// Protocol (little-endian, one request per round trip): the handshake 'H' u32 kMagic u32
// job length (<= kMaxKeyBytes) job, answered 'h' u32 kMagic, or for another job 'x' u32
// kMagic u32 length and the store's job before the store hangs up; then u8 op ('S' set,
// 'G' get-if-present), u32 key length (<= kMaxKeyBytes), key, then for 'S' u32 value length
// (<= kMaxValueBytes) and value; the answer to 'S' is 'k', to 'G' a u8 found flag (0 or 1)
// then, if found, u32 length and the value.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace oomlab {

class TcpStore {
 public:
  static constexpr uint32_t kMagic = 0x316D6F6F;   // "oom1" (protocol version 1)
  static constexpr size_t kMaxKeyBytes = size_t(64) << 10, kMaxValueBytes = size_t(64) << 20;
  // is_server: this process listens (rank 0). The client connects, retrying until timeout.
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout,
           std::string job = "");
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  std::vector<char> get(const std::string& key);               // waits up to timeout()
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return timeout_; }
  int port() const { return port_; }   // the bound port (useful when 0 was asked: any free port)

 private:
  using Clock = std::chrono::steady_clock;
  void connect_client(Clock::time_point deadline);
  void greet();
  void check_sizes(const std::string& key, size_t value_bytes) const;
  [[noreturn]] void protocol_error(const std::string& what) const;
  bool try_get(const std::string& key, std::vector<char>* value);
  void serve();
  void shutdown();   // closes the client, stops and joins the server

  std::string host_;
  int port_;
  std::string job_;   // the handshake's identity: the server serves only clients of this job
  std::chrono::milliseconds timeout_;
  int client_fd_ = -1;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};   // the server thread's stop signal
  std::thread server_;
};

}  // namespace oomlab
