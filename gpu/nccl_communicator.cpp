#include "gpu/nccl_communicator.h"

#include "src/dist/bootstrap.h"
#include "src/dist/communicator.h"

#if ASTRAI_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/check.h"
#include "gpu/cuda_backend.h"
#endif

namespace astrai::gpu {

#if ASTRAI_HAVE_NCCL
namespace {

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return {};
  return internal_error(std::string("NCCL ") + what + ": " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<HostGroup> group, int rank, ncclComm_t comm, cudaStream_t stream,
                   int device)
      : Communicator(std::move(group), rank), comm_(comm), stream_(stream), device_(device) {}
  ~NcclCommunicator() override {
    if (!aborted_.exchange(true)) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // From any thread: the mutex keeps it from freeing the communicator under an enqueue in flight.
  bool abort_device() override {
    std::lock_guard lock(mu_);
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);  // also frees the communicator
    return true;
  }

  void all_reduce_sum(Tensor t) override {
    std::lock_guard lock(mu_);
    if (aborted_) throw Error(Status(ErrorCode::cancelled, "all_reduce_sum: the NCCL group was aborted"));
    ncclDataType_t type = ncclFloat32;
    switch (t.dtype) {
      case DType::f32: type = ncclFloat32; break;
      case DType::bf16: type = ncclBfloat16; break;
      case DType::f16: type = ncclFloat16; break;
      default: throw Error(invalid_argument("all_reduce_sum: NCCL reduces f32, bf16 or f16 tensors"));
    }
    if (t.device != Device::cuda || !t.is_contiguous())
      throw Error(invalid_argument("all_reduce_sum: needs a contiguous cuda tensor, got " + t.shape_str()));
    ASTRAI_CUDA_CHECK(cudaSetDevice(device_));
    const Status s = nccl_status(
        ncclAllReduce(t.data, t.data, size_t(t.numel()), type, ncclSum, comm_, stream_), "all-reduce");
    if (!s.ok()) throw Error(s);
  }

 private:
  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
  std::mutex mu_;
  std::atomic<bool> aborted_ = false;
};

// The GPU and stream of each rank's backend: one GPU per rank.
struct RankDevices {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
};
Result<RankDevices> rank_devices(std::span<Backend* const> backends) {
  RankDevices rd;
  for (Backend* b : backends) {
    const CudaBackendStream s = cuda_backend_stream(*b);
    if (!s.stream) return invalid_argument("NCCL: every rank of the group must be a CUDA backend");
    for (int d : rd.devices)
      if (d == s.device)
        return invalid_argument("NCCL: two ranks on GPU " + std::to_string(d) +
                                "; each rank needs its own GPU");
    rd.devices.push_back(s.device);
    rd.streams.push_back(static_cast<cudaStream_t>(s.stream));
  }
  return rd;
}

// One Communicator per comm, sharing this process's host group.
std::vector<std::unique_ptr<Communicator>> wrap_comms(const std::vector<ncclComm_t>& comms,
                                                      const RankDevices& rd) {
  const int n = int(comms.size());
  auto group = std::make_shared<HostGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(group, r, comms[size_t(r)], rd.streams[size_t(r)],
                                                     rd.devices[size_t(r)]));
  return out;
}

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<Backend* const> backends) {
  const int n = int(backends.size());
  ASTRAI_ASSIGN_OR_RETURN(const RankDevices rd, rank_devices(backends));
  std::vector<ncclComm_t> comms(size_t(n), nullptr);
  ASTRAI_RETURN_IF_ERROR(nccl_status(ncclCommInitAll(comms.data(), n, rd.devices.data()), "init"));
  return wrap_comms(comms, rd);
}

// ---- across processes (src/dist/bootstrap.h) ----------------------------------------------------

Result<std::vector<uint8_t>> make_nccl_unique_id() {
  ncclUniqueId id;
  ASTRAI_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&id), "unique id"));
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(id.internal),
                              reinterpret_cast<const uint8_t*>(id.internal) + NCCL_UNIQUE_ID_BYTES);
}

// This process's ranks of a world that spans processes: backends[i] is global rank first_rank + i.
// Each collective sums over the whole world; the host group (agree, barrier) is this process's ranks
// only (the nodes agree over the bootstrap's link).
Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_world_communicators(
    std::span<Backend* const> backends, std::span<const uint8_t> id, int world_size, int first_rank) {
  const int n = int(backends.size());
  if (id.size() != NCCL_UNIQUE_ID_BYTES)
    return invalid_argument("NCCL: the unique id from node 0 has " + std::to_string(id.size()) +
                            " bytes, not " + std::to_string(NCCL_UNIQUE_ID_BYTES));
  if (first_rank < 0 || first_rank + n > world_size)
    return invalid_argument("NCCL: ranks [" + std::to_string(first_rank) + ", " +
                            std::to_string(first_rank + n) + ") are outside a world of " +
                            std::to_string(world_size));
  ASTRAI_ASSIGN_OR_RETURN(const RankDevices rd, rank_devices(backends));
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), NCCL_UNIQUE_ID_BYTES);
  std::vector<ncclComm_t> comms(size_t(n), nullptr);
  // One thread initialises every local GPU's rank: inside a group, so that NCCL waits for all of
  // them (and the other processes' ranks) at once.
  ASTRAI_RETURN_IF_ERROR(nccl_status(ncclGroupStart(), "group start"));
  Status init;
  for (int r = 0; r < n && init.ok(); ++r) {
    ASTRAI_CUDA_CHECK(cudaSetDevice(rd.devices[size_t(r)]));
    init = nccl_status(ncclCommInitRank(&comms[size_t(r)], world_size, uid, first_rank + r), "init rank");
  }
  const Status end = nccl_status(ncclGroupEnd(), "init across processes");
  ASTRAI_RETURN_IF_ERROR(init);
  ASTRAI_RETURN_IF_ERROR(end);
  return wrap_comms(comms, rd);
}

}  // namespace

void register_nccl_communicator() {
  register_communicator_factory(Device::cuda, make_nccl_communicators);
  register_world_transport(Device::cuda, {make_nccl_unique_id, make_nccl_world_communicators});
}
#else
void register_nccl_communicator() {}
#endif

}  // namespace astrai::gpu
