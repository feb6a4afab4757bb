#include "src/core/threads.h"

#include <thread>

namespace astrai {
namespace {
int g_threads = 0;
}
// The CPU backend reads num_threads() when it starts; it owns the OpenMP/OpenBLAS calls so that
// core stays free of them.
void set_num_threads(int n) {
  g_threads = n;
}
int num_threads() {
  if (g_threads > 0) return g_threads;
  const unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}
}  // namespace astrai
