// Thread count for CPU compute (OpenMP and OpenBLAS).
#pragma once

namespace astrai {
void set_num_threads(int n);
int num_threads();
}  // namespace astrai
