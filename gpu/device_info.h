#pragma once

namespace astrai::gpu {
// Number of CUDA devices visible (0 when there is no driver or no GPU).
int device_count();
}  // namespace astrai::gpu
