// test_tcp_store.cpp — the rendezvous store (engine/parallel/tcp_store.h) on loopback: set /
// get across clients, a get that waits for a later set, bounded waits (a key that never
// comes, a master that is not there, a port already taken) with errors naming what is wrong,
// and strangers: a client of another service on MASTER_PORT is a CommError, a stranger's
// connection to the store (an HTTP request, a hostile length) is closed while ranks go on,
// and a peer that never reads its answers does not stall the store.
// ctest tier: ranks
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "engine/parallel/communicator.h"
#include "engine/parallel/tcp_store.h"
#include "tests/loopback_util.h"

using namespace oomlab;
using namespace std::chrono_literals;

TEST(TcpStore, SetGetAcrossClientsAndWaitForALaterSet) {
  TcpStore server("127.0.0.1", 0, true, 5s);
  TcpStore client("127.0.0.1", server.port(), false, 5s);
  server.set("a", {'x', 'y'});
  EXPECT_EQ(client.get("a"), (std::vector<char>{'x', 'y'}));
  client.set("a", {});
  EXPECT_TRUE(server.get("a").empty());
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    std::vector<char> big(200000, 'z');
    server.set("late", big);
  });
  EXPECT_EQ(client.get("late").size(), 200000u);
  later.join();
}

TEST(TcpStore, WaitsAreBoundedAndErrorsNameTheCause) {
  TcpStore server("127.0.0.1", 0, true, 5s);
  try {
    server.wait({"never"}, 100ms);
    FAIL() << "no timeout";
  } catch (const CommTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  try {
    TcpStore taken("127.0.0.1", server.port(), true, 1s);
    FAIL() << "bound a port in use";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on port"), std::string::npos) << e.what();
  }
}

TEST(TcpStore, NoMasterIsATimeoutNamingTheAddress) {
  int port = 0;
  { TcpStore was("127.0.0.1", 0, true, 1s); port = was.port(); }   // a port nobody listens on now
  try {
    TcpStore client("127.0.0.1", port, false, 300ms);
    FAIL() << "connected to nobody";
  } catch (const CommTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(str_cat("127.0.0.1:", port)), std::string::npos) << e.what();
  }
}

namespace {
// A raw loopback connection to `port` (a stranger: no handshake unless it sends one).
int raw_connect(int port) {
  const int fd = oomlab_test::loopback_connect(port, 5);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  return fd;
}

// Sends `bytes`, then reads until the peer closes: true when it closed within the 5 s timeout.
bool closed_after(int fd, const std::string& bytes) {
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  return oomlab_test::read_until_closed(fd);
}

std::string u32_bytes(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
}  // namespace

// Another service on MASTER_PORT (here one that greets like sshd, then waits): the client's
// handshake fails at once with a CommError naming the address, no garbage length allocated.
TEST(TcpStore, AnotherServiceOnTheMasterPortIsACommError) {
  int port = 0;
  const int lfd = oomlab_test::loopback_listen(&port);
  ASSERT_GE(lfd, 0);
  std::thread sshd([&] {
    const int fd = ::accept(lfd, nullptr, nullptr);
    const std::string banner = "SSH-2.0-OpenSSH_9.2p1\r\n";
    (void)!::send(fd, banner.data(), banner.size(), MSG_NOSIGNAL);
    oomlab_test::read_until_closed(fd);   // until the client hangs up
    ::close(fd);
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore client("127.0.0.1", port, false, 10s);
    FAIL() << "took sshd for a store";
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is not oomlab's rendezvous store"), std::string::npos) << what;
    EXPECT_NE(what.find(str_cat("127.0.0.1:", port)), std::string::npos) << what;
    EXPECT_NE(what.find("53 53 48 2d 32"), std::string::npos) << what;   // "SSH-2"
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "no wait for the timeout";
  sshd.join();
  ::close(lfd);
}

// Strangers on the store's port are hung up on, and the ranks' clients are served on: an
// HTTP request, a handshake with another magic, and a greeted peer announcing a 4 GiB key,
// a 4 GiB value or an unknown op.
TEST(TcpStore, AStrangerIsHungUpOnAndTheRanksGoOn) {
  TcpStore server("127.0.0.1", 0, true, 5s);
  TcpStore client("127.0.0.1", server.port(), false, 5s);
  const std::string hello = "H" + u32_bytes(TcpStore::kMagic) + u32_bytes(0);   // job ""
  const std::string strangers[] = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
      "H" + u32_bytes(0x12345678) + u32_bytes(0),
      hello + "G" + u32_bytes(0xFFFFFFFFu),
      hello + "S" + u32_bytes(1) + "k" + u32_bytes(0xFFFFFFFFu),
      hello + "X" + u32_bytes(0),
  };
  for (const std::string& bytes : strangers) {
    SCOPED_TRACE(bytes.substr(0, 5));
    const int fd = raw_connect(server.port());
    EXPECT_TRUE(closed_after(fd, bytes)) << "the store kept a stranger's connection";
    ::close(fd);
    client.set("after", {'o', 'k'});
    EXPECT_EQ(server.get("after"), (std::vector<char>{'o', 'k'}));
  }
}

TEST(TcpStore, AKeyOrValuePastTheLimitsIsRefusedBeforeSending) {
  TcpStore server("127.0.0.1", 0, true, 5s);
  EXPECT_THROW(server.set(std::string(TcpStore::kMaxKeyBytes + 1, 'k'), {}), CommError);
  EXPECT_THROW(server.set("v", std::vector<char>(TcpStore::kMaxValueBytes + 1)), CommError);
  server.set("v", {'1'});   // the connection is still good
  EXPECT_EQ(server.get("v"), std::vector<char>{'1'});
}

// A greeted peer asks for a 1 MiB value 200 times and never reads the answers: the store
// keeps serving the ranks (it used to block in send() on that peer, and every rank with it).
TEST(TcpStore, APeerThatDoesNotReadDoesNotStallTheStore) {
  TcpStore server("127.0.0.1", 0, true, 5s);
  TcpStore client("127.0.0.1", server.port(), false, 3s);
  server.set("big", std::vector<char>(size_t(1) << 20, 'b'));
  const int fd = raw_connect(server.port());
  std::string requests = "H" + u32_bytes(TcpStore::kMagic) + u32_bytes(0);
  for (int i = 0; i < 200; ++i) requests += "G" + u32_bytes(3) + "big";
  ASSERT_EQ(::send(fd, requests.data(), requests.size(), MSG_NOSIGNAL), ssize_t(requests.size()));
  std::this_thread::sleep_for(100ms);   // the store has its requests, its socket buffer is full
  client.set("still", {'u', 'p'});
  EXPECT_EQ(client.get("still"), (std::vector<char>{'u', 'p'}));
  ::close(fd);
}

// A second job on the same MASTER_PORT: its ranks are told the store's job and refused before
// they can touch a key; the store's own ranks go on.
TEST(TcpStore, ARankOfAnotherJobIsRefusedNamingBothJobs) {
  TcpStore server("127.0.0.1", 0, true, 5s, "world size 2, run a");
  TcpStore mine("127.0.0.1", server.port(), false, 5s, "world size 2, run a");
  mine.set("gloo/1", {'1'});
  for (const char* other : {"world size 3, run a", "world size 2, run b", "world size 2"}) {
    try {
      TcpStore theirs("127.0.0.1", server.port(), false, 5s, other);
      ADD_FAILURE() << "joined another job: " << other;
    } catch (const CommError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("serves another job (world size 2, run a; this rank's: " + std::string(other)),
                std::string::npos) << what;
      EXPECT_NE(what.find("--master-port"), std::string::npos) << what;
    }
  }
  EXPECT_EQ(server.get("gloo/1"), std::vector<char>{'1'});
}
