// How libflowlane finds the CUDA runtime and NCCL at run time (gpu/runtime.hpp): each case
// runs load_probe (linked with libflowlane only) in a child process with
// FLOWLANE_CUDART_PATH / FLOWLANE_NCCL_PATH set, and reads what it printed. The fakes of
// tests/gpu/fake stand in for the libraries (their paths are compiled in).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>

namespace {

// step -> "<status> <value> | <message>"
std::map<std::string, std::string> probe(const std::string& cudart, const std::string& nccl) {
  std::string cmd = "env -u LD_PRELOAD -u FLOWLANE_CUDART_PATH -u FLOWLANE_NCCL_PATH";
  if (!cudart.empty()) cmd += " FLOWLANE_CUDART_PATH='" + cudart + "'";
  if (!nccl.empty()) cmd += " FLOWLANE_NCCL_PATH='" + nccl + "'";
  cmd += " '" FL_LOAD_PROBE "' 2>&1";
  std::map<std::string, std::string> out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), int(buf.size()), p) != nullptr) {
    std::string l(buf.data());
    if (!l.empty() && l.back() == '\n') l.pop_back();
    auto colon = l.find(": ");
    if (colon != std::string::npos) out[l.substr(0, colon)] = l.substr(colon + 2);
  }
  pclose(p);
  return out;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_cpu_ok(std::map<std::string, std::string>& r) {
  EXPECT_EQ(r["engine"].rfind("FL_OK", 0), 0u) << r["engine"];
  EXPECT_EQ(r["cpu"].rfind("FL_OK 1 ", 0), 0u) << "CPU work must be unaffected: " << r["cpu"];
}

const std::string kMissing = "/nonexistent/flowlane-test/libcudart.so.13";

TEST(load, MissingRuntimeByPathAnswersUnsupportedNamingIt) {
  auto r = probe(kMissing, "");
  expect_cpu_ok(r);
  for (const char* step : {"device_count", "cuda_stream", "pinned", "nccl"}) {
    EXPECT_TRUE(has(r[step], "FL_ERR_UNSUPPORTED")) << step << ": " << r[step];
    EXPECT_TRUE(has(r[step], "FLOWLANE_CUDART_PATH=" + kMissing)) << step << ": " << r[step];
    EXPECT_TRUE(has(r[step], "No such file")) << "dlerror's text: " << r[step];
  }
}

TEST(load, DisabledRuntimeAnswersUnsupported) {
  auto r = probe("none", "");
  expect_cpu_ok(r);
  EXPECT_TRUE(has(r["device_count"], "FL_ERR_UNSUPPORTED")) << r["device_count"];
  EXPECT_TRUE(has(r["device_count"], "FLOWLANE_CUDART_PATH=none")) << r["device_count"];
  EXPECT_TRUE(has(r["cuda_stream"], "FL_ERR_UNSUPPORTED")) << r["cuda_stream"];
}

TEST(load, RuntimeLackingAFunctionIsRefusedNamingIt) {
  auto r = probe(FL_FAKE_CUDART_NOSYM, "");
  expect_cpu_ok(r);
  EXPECT_TRUE(has(r["device_count"], "FL_ERR_UNSUPPORTED")) << r["device_count"];
  EXPECT_TRUE(has(r["device_count"], "lacks cudaPointerGetAttributes")) << r["device_count"];
  EXPECT_TRUE(has(r["device_count"], FL_FAKE_CUDART_NOSYM)) << r["device_count"];
}

TEST(load, RuntimeOfAnotherMajorVersionIsRefused) {
  auto r = probe(FL_FAKE_CUDART_V12, "");
  expect_cpu_ok(r);
  EXPECT_TRUE(has(r["device_count"], "FL_ERR_UNSUPPORTED")) << r["device_count"];
  EXPECT_TRUE(has(r["device_count"], "CUDA runtime 12.8")) << r["device_count"];
  EXPECT_TRUE(has(r["device_count"], "major versions differ")) << r["device_count"];
}

TEST(load, RuntimeLoadedByPathIsUsed) {
  auto r = probe(FL_FAKE_CUDART, FL_FAKE_NCCL);
  expect_cpu_ok(r);
  EXPECT_EQ(r["device_count"].rfind("FL_OK 1 ", 0), 0u) << "the fake's one device: " << r["device_count"];
  EXPECT_EQ(r["cuda_stream"].rfind("FL_OK", 0), 0u) << r["cuda_stream"];
  EXPECT_EQ(r["pinned"].rfind("FL_OK", 0), 0u) << r["pinned"];
  EXPECT_EQ(r["nccl"].rfind("FL_OK", 0), 0u) << r["nccl"];
}

TEST(load, MissingNcclLeavesCudaWorking) {
  auto r = probe(FL_FAKE_CUDART, "/nonexistent/flowlane-test/libnccl.so.2");
  expect_cpu_ok(r);
  EXPECT_EQ(r["device_count"].rfind("FL_OK 1 ", 0), 0u) << r["device_count"];
  EXPECT_EQ(r["cuda_stream"].rfind("FL_OK", 0), 0u) << r["cuda_stream"];
  EXPECT_TRUE(has(r["nccl"], "FL_ERR_UNSUPPORTED")) << r["nccl"];
  EXPECT_TRUE(has(r["nccl"], "FLOWLANE_NCCL_PATH=/nonexistent/flowlane-test/libnccl.so.2")) << r["nccl"];
}

TEST(load, NcclOfAnotherMajorVersionIsRefused) {
  auto r = probe(FL_FAKE_CUDART, FL_FAKE_NCCL_V3);
  expect_cpu_ok(r);
  EXPECT_TRUE(has(r["nccl"], "FL_ERR_UNSUPPORTED")) << r["nccl"];
  EXPECT_TRUE(has(r["nccl"], "major versions differ")) << r["nccl"];
}

TEST(load, DisabledNcclAnswersUnsupported) {
  auto r = probe(FL_FAKE_CUDART, "none");
  EXPECT_TRUE(has(r["nccl"], "FL_ERR_UNSUPPORTED")) << r["nccl"];
  EXPECT_TRUE(has(r["nccl"], "FLOWLANE_NCCL_PATH=none")) << r["nccl"];
}

}  // namespace
