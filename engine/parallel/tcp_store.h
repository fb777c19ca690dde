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
//    (poll over every connection), so a slow client never blocks the others.
// Protocol (little-endian, one request per round trip): u8 op ('S' set, 'G' get-if-present),
// u32 key length, key, then for 'S' u32 value length and value; the answer to 'S' is one
// byte, to 'G' a u8 found flag then, if found, u32 length and the value.
#pragma once
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace oomlab {

class TcpStore {
 public:
  // is_server: this process listens (rank 0). The client connects, retrying until timeout.
  TcpStore(const std::string& host, int port, bool is_server, std::chrono::milliseconds timeout);
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
  bool try_get(const std::string& key, std::vector<char>* value);
  void serve();
  void shutdown();   // closes the client, stops and joins the server

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  int client_fd_ = -1;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};   // the server thread's stop signal
  std::thread server_;
};

}  // namespace oomlab
