// The tensor-parallel group's all-reduce on CUDA devices through NCCL (src/dist/communicator.h):
// one process, one communicator per GPU from ncclCommInitAll, each collective enqueued on its
// rank's backend stream (so decode graphs capture it with the layer's kernels).
#pragma once

namespace astrai::gpu {

// Registers the NCCL factory with make_communicators for Device::cuda, and the transport across
// processes (register_world_transport: ncclGetUniqueId on node 0, ncclCommInitRank on every node);
// a no-op in a build without NCCL (--tp > 1 or nnodes > 1 on cuda then says so). Called by
// register_cuda_backend.
void register_nccl_communicator();

}  // namespace astrai::gpu
