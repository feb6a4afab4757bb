// Model FLOPs utilisation: the FLOPs a training step does per token, and the bf16 GEMM peak of a
// backend measured on it (the denominator: what cuBLASLt reaches on this GPU, not the datasheet).
// `astrai train` writes "mfu" into metrics.jsonl on a GPU; `astrai bench train` reports both.
#pragma once

#include "src/backend/backend.h"
#include "src/model/config.h"

namespace astrai::train {

// Model FLOPs per trained token (forward + backward), as llm.c and nanoGPT count them:
//   6 * (the matmul weights: L * (Wqkv + Wo + Wgate_up + Wdown) + vocab * hidden for the head)
//   + 6 * L * q_dim * seq_len    (causal attention: QK^T and PV over seq_len / 2 keys on average,
//                                 forward 2 * 2 * q_dim * seq_len / 2, times 3 with the backward)
// Embedding lookups, norms and element-wise ops are not counted.
double flops_per_token(const ModelConfig& config, int64_t seq_len);

// TFLOP/s of the backend's gemm on C[n, n] = A[n, n] B[n, n]^T in bf16 with n = 8192, best of 3
// rounds of 10 (about a second on an H200). 0 on a backend whose compute dtype is not bf16.
double measure_bf16_peak_tflops(Backend& backend);

}  // namespace astrai::train
