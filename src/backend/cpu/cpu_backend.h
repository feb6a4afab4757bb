// CpuBackend: f32 compute on host memory. GEMMs go through OpenBLAS, the other ops are OpenMP
// loops written so that GCC vectorises their inner loops. Thread count: fixed at creation (0:
// num_threads()); it holds on whichever thread calls the ops.
#pragma once

#include <memory>

#include "src/backend/backend.h"

namespace astrai {

std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace astrai
