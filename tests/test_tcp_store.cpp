// test_tcp_store.cpp — the rendezvous store (engine/parallel/tcp_store.h) on loopback: set /
// get across clients, a get that waits for a later set, bounded waits (a key that never
// comes, a master that is not there, a port already taken) with errors naming what is wrong.
// ctest tier: ranks
#include <gtest/gtest.h>

#include <thread>

#include "engine/parallel/communicator.h"
#include "engine/parallel/tcp_store.h"

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
