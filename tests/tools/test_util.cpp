#include "tools/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace astrai::test {
namespace fs = std::filesystem;

TempDir::TempDir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("ASTRAI_TEST_TMP");
  fs::path root = base ? fs::path(base) : fs::temp_directory_path();
  fs::create_directories(root);
  path_ = root / (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(path_);
  fs::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!std::getenv("ASTRAI_KEEP_TMP")) fs::remove_all(path_, ec);
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot write " + p.string());
  f << text;
}

CommandResult run_command(const std::string& cmd, const std::string& stdin_text) {
  TempDir io("cmd");
  write_file(io / "in", stdin_text);
  const std::string full = "(" + cmd + ") <'" + (io / "in").string() + "' >'" + (io / "out").string() +
                           "' 2>'" + (io / "err").string() + "'";
  const int st = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  r.out = read_file(io / "out");
  r.err = read_file(io / "err");
  return r;
}

std::string astrai_bin() {
  const char* b = std::getenv("ASTRAI_BIN");
  if (!b) throw std::runtime_error("ASTRAI_BIN not set (run tests through ctest)");
  return b;
}

fs::path source_dir() {
  const char* s = std::getenv("ASTRAI_SOURCE_DIR");
  if (!s) throw std::runtime_error("ASTRAI_SOURCE_DIR not set (run tests through ctest)");
  return s;
}

std::string python3() {
  return "/usr/bin/python3";
}

uint64_t fresh_seed() {
  if (const char* s = std::getenv("ASTRAI_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ uint64_t(::getpid());
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace astrai::test
