#include "gpu/nccl_communicator.h"

#include "src/dist/bootstrap.h"
#include "src/dist/communicator.h"

#if ASTRAI_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/check.h"
#include "gpu/cuda_backend.h"
#include "gpu/peer_all_reduce.h"
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
                   int device, std::shared_ptr<PeerAllReduce> peer)
      : Communicator(std::move(group), rank),
        comm_(comm),
        stream_(stream),
        device_(device),
        peer_(std::move(peer)) {}
  ~NcclCommunicator() override {
    if (!aborted_.exchange(true)) ncclCommDestroy(comm_);
    if (side_) {
      cudaSetDevice(device_);
      cudaEventDestroy(forked_);
      cudaEventDestroy(side_done_);
      cudaStreamDestroy(side_);
    }
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // From any thread: the mutex keeps it from freeing the communicator under an enqueue in flight.
  bool abort_device() override {
    std::lock_guard lock(mu_);
    if (peer_) peer_->abort();                           // releases a peer kernel waiting for us
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
    if (peer_ && peer_->fits(t)) {
      peer_->all_reduce_sum(rank(), t, stream_);
      return;
    }
    const Status s = nccl_status(
        ncclAllReduce(t.data, t.data, size_t(t.numel()), type, ncclSum, comm_, current()), "all-reduce");
    if (!s.ok()) throw Error(s);
  }

  void reduce_scatter_sum(const Tensor& in, Tensor out) override {
    std::lock_guard lock(mu_);
    check_f32(in, "reduce_scatter_sum");
    check_f32(out, "reduce_scatter_sum");
    if (in.numel() != out.numel() * size())
      throw Error(invalid_argument("reduce_scatter_sum: the input is not " + std::to_string(size()) +
                                   " blocks of the output's " + std::to_string(out.numel()) + " elements"));
    const Status s = nccl_status(
        ncclReduceScatter(in.data, out.data, size_t(out.numel()), ncclFloat32, ncclSum, comm_, current()),
        "reduce-scatter");
    if (!s.ok()) throw Error(s);
  }

  void all_gather(const Tensor& in, Tensor out) override {
    std::lock_guard lock(mu_);
    check_f32(in, "all_gather");
    check_f32(out, "all_gather");
    if (out.numel() != in.numel() * size())
      throw Error(invalid_argument("all_gather: the output is not " + std::to_string(size()) +
                                   " blocks of the input's " + std::to_string(in.numel()) + " elements"));
    const Status s = nccl_status(
        ncclAllGather(in.data, out.data, size_t(in.numel()), ncclFloat32, comm_, current()), "all-gather");
    if (!s.ok()) throw Error(s);
  }

  void reduce_sum(Tensor t, int root) override {
    std::lock_guard lock(mu_);
    check_f32(t, "reduce_sum");
    if (root < 0 || root >= size())
      throw Error(invalid_argument("reduce_sum: no rank " + std::to_string(root)));
    const Status s = nccl_status(
        ncclReduce(t.data, t.data, size_t(t.numel()), ncclFloat32, ncclSum, root, comm_, current()),
        "reduce");
    if (!s.ok()) throw Error(s);
  }

  // The side stream waits for an event recorded now on the backend's stream; collectives go there
  // until join_side() makes the backend's stream wait for an event recorded after them.
  void fork_side() override {
    std::lock_guard lock(mu_);
    ASTRAI_CUDA_CHECK(cudaSetDevice(device_));
    if (!side_) {
      ASTRAI_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      ASTRAI_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
      ASTRAI_CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
    }
    ASTRAI_CUDA_CHECK(cudaEventRecord(forked_, stream_));
    ASTRAI_CUDA_CHECK(cudaStreamWaitEvent(side_, forked_, 0));
    on_side_ = true;
  }

  void join_side() override {
    std::lock_guard lock(mu_);
    if (!on_side_) return;
    ASTRAI_CUDA_CHECK(cudaSetDevice(device_));
    ASTRAI_CUDA_CHECK(cudaEventRecord(side_done_, side_));
    ASTRAI_CUDA_CHECK(cudaStreamWaitEvent(stream_, side_done_, 0));
    on_side_ = false;
  }

 private:
  // Under mu_: checks the group and the tensor, selects the rank's device.
  void check_f32(const Tensor& t, const char* what) {
    if (aborted_)
      throw Error(Status(ErrorCode::cancelled, std::string(what) + ": the NCCL group was aborted"));
    if (t.device != Device::cuda || t.dtype != DType::f32 || !t.is_contiguous())
      throw Error(invalid_argument(std::string(what) + ": needs a contiguous f32 cuda tensor, got " +
                                   std::string(dtype_name(t.dtype)) + " " + t.shape_str()));
    ASTRAI_CUDA_CHECK(cudaSetDevice(device_));
  }
  cudaStream_t current() const { return on_side_ ? side_ : stream_; }

  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaStream_t side_ = nullptr;  // fork_side()'s stream, made on first use
  cudaEvent_t forked_ = nullptr, side_done_ = nullptr;
  bool on_side_ = false;
  int device_;
  std::shared_ptr<PeerAllReduce> peer_;  // small tensors (decode); null: NCCL for everything
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

// One Communicator per comm, sharing this process's host group (and `peer`, when given).
std::vector<std::unique_ptr<Communicator>> wrap_comms(const std::vector<ncclComm_t>& comms,
                                                      const RankDevices& rd,
                                                      const std::shared_ptr<PeerAllReduce>& peer = nullptr) {
  const int n = int(comms.size());
  auto group = std::make_shared<HostGroup>(n);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(group, r, comms[size_t(r)], rd.streams[size_t(r)],
                                                     rd.devices[size_t(r)], peer));
  return out;
}

Result<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(
    std::span<Backend* const> backends) {
  const int n = int(backends.size());
  ASTRAI_ASSIGN_OR_RETURN(const RankDevices rd, rank_devices(backends));
  std::vector<ncclComm_t> comms(size_t(n), nullptr);
  ASTRAI_RETURN_IF_ERROR(nccl_status(ncclCommInitAll(comms.data(), n, rd.devices.data()), "init"));
  // Tensors up to this size take the one-shot peer-memory all-reduce (ASTRAI_PEER_ALL_REDUCE_MAX
  // bytes; 0 turns it off): a decode step's activations. Larger ones (prefill, gradients) use NCCL.
  // Only here, where every rank is in this process: across processes the peers' buffers are not
  // addressable.
  int64_t peer_max = 1 << 20;
  if (const char* e = std::getenv("ASTRAI_PEER_ALL_REDUCE_MAX")) peer_max = std::atoll(e);
  std::shared_ptr<PeerAllReduce> peer;
  if (peer_max > 0) peer = PeerAllReduce::create(rd.devices, peer_max);
  return wrap_comms(comms, rd, peer);
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
