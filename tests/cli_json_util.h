// cli_json_util.h — tests' `oomlab` runs that write --json: the command's results, parsed
// (an expected-success run; {} and a test failure otherwise).
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <gtest/gtest.h>

#include "cli_test_util.h"
#include "temp_dir_util.h"

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

inline nlohmann::json run_json_ok(const std::string& args, const char* tag) {
  TempDir d(tag);
  const CliRun r = run_oomlab(args + " --json " + d.file("r.json"));
  EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  return r.code == 0 ? read_json(d.file("r.json")) : nlohmann::json::object();
}
