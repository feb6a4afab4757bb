#include "train/data_parallel.h"

#include <algorithm>
#include <optional>

#include "src/core/threads.h"
#include "src/dist/communicator.h"
#include "src/dist/rank_threads.h"

namespace astrai::train {

TrainBatch batch_rows(const TrainBatch& b, int begin, int end) {
  TrainBatch out;
  out.batch = end - begin;
  out.seq_len = b.seq_len;
  const auto from = size_t(begin) * size_t(b.seq_len), to = size_t(end) * size_t(b.seq_len);
  auto cut = [&](const std::vector<int32_t>& v) {
    return std::vector<int32_t>(v.begin() + ptrdiff_t(std::min(from, v.size())),
                                v.begin() + ptrdiff_t(std::min(to, v.size())));
  };
  out.tokens = cut(b.tokens);
  out.targets = cut(b.targets);
  out.positions = cut(b.positions);
  out.doc_start = cut(b.doc_start);
  return out;
}

namespace {

Result<std::unique_ptr<Backend>> make_rank_backend(Device device, int rank, int threads) {
  BackendOptions bo;
  bo.device = device;
  bo.gpu_index = rank;
  bo.threads = threads;
  return make_backend(bo);
}

}  // namespace

Result<std::unique_ptr<DataParallelGroup>> DataParallelGroup::create(const ModelConfig& config,
                                                                     const WeightStore& weights,
                                                                     const DataParallelOptions& o) {
  if (o.dp < 1) return invalid_argument("dp: must be at least 1 (got " + std::to_string(o.dp) + ")");
  ASTRAI_RETURN_IF_ERROR(validate_node_options(o.nodes));
  if (o.device != "cpu" && o.device != "cuda" && o.device != "auto")
    return invalid_argument("device: '" + o.device + "' must be one of cpu | cuda | auto");
  std::unique_ptr<DataParallelGroup> g(new DataParallelGroup());
  g->ranks_.resize(size_t(o.dp));
  g->world_ = o.dp * o.nodes.nnodes;
  g->first_rank_ = o.dp * o.nodes.node_rank;
  g->threads_ = std::make_unique<RankThreads>(o.dp);
  // The CPU backend sets its OpenMP thread count on the thread that creates it, which is why each
  // rank's backend is made on the rank's own thread. dp 1 keeps the whole machine (threads 0).
  const int threads =
      o.dp == 1 ? o.cpu_threads : std::max(1, (o.cpu_threads > 0 ? o.cpu_threads : num_threads()) / o.dp);
  auto load = [&](int r, Device d) -> Status {
    Rank& rank = g->ranks_[size_t(r)];
    auto be = make_rank_backend(d, r, threads);
    if (!be.ok() && o.dp > 1)
      return Status(be.status().code(), "dp " + std::to_string(o.dp) + " needs " + std::to_string(o.dp) +
                                            " devices, one per rank: rank " + std::to_string(r) + ": " +
                                            be.status().message());
    if (!be.ok()) return be.status();
    rank.backend = std::move(be).value();
    ASTRAI_ASSIGN_OR_RETURN(rank.model, TrainModel::create(config, weights, *rank.backend));
    rank.opt = std::make_unique<AdamW>(*rank.backend, o.adamw);
    rank.opt->init(rank.model->params());
    return {};
  };
  // Rank 0 first, on this thread: with device auto it decides the device of every rank.
  Device device = Device::cpu;
  if (o.device == "cuda" || (o.device == "auto" && has_backend_factory(Device::cuda))) {
    device = Device::cuda;
    Status s = load(0, device);
    if (!s.ok() && o.device == "cuda") return s;
    if (!s.ok()) device = Device::cpu;
  }
  if (device == Device::cpu) ASTRAI_RETURN_IF_ERROR(load(0, device));
  std::optional<WorldTransport> transport;
  if (o.nodes.nnodes > 1) {
    // Node 0 makes the id before listening; every node has it once the bootstrap returns.
    ASTRAI_ASSIGN_OR_RETURN(transport, world_transport(device));
    std::vector<uint8_t> id;
    if (o.nodes.node_rank == 0) {
      ASTRAI_ASSIGN_OR_RETURN(id, transport->make_id());
    }
    ASTRAI_ASSIGN_OR_RETURN(g->link_, NodeLink::connect(o.nodes, g->world_, o.fingerprint, id));
  }
  if (g->world_ == 1) return g;
  ASTRAI_RETURN_IF_ERROR(run_on_ranks(*g->threads_, {}, "data-parallel", nullptr, nullptr,
                                      [&](int r) { return r == 0 ? Status() : load(r, device); }));
  std::vector<Backend*> backends;
  for (const Rank& r : g->ranks_) backends.push_back(r.backend.get());
  auto comms = transport ? transport->make_communicators(backends, g->link_->id(), g->world_, g->first_rank_)
                         : make_communicators(backends);
  if (!comms.ok())
    return Status(comms.status().code(), "dp " + std::to_string(o.dp) + ": " + comms.status().message());
  g->comms_ = std::move(comms).value();
  if (g->link_) {
    // A rank may be waiting on its device for a lost node's part of an all-reduce: stop NCCL, and
    // wake the local ranks waiting in a host barrier.
    DataParallelGroup* raw = g.get();
    g->link_->on_lost([raw](const Status&) {
      for (auto& c : raw->comms_) {
        c->abort_device();
        c->abort();
      }
    });
  }
  return g;
}

DataParallelGroup::~DataParallelGroup() = default;

Device DataParallelGroup::device() const {
  return ranks_[0].backend->device();
}

Status DataParallelGroup::on_all_ranks(const std::function<Status(int)>& fn) {
  if (!dead_.ok()) return dead_;
  return run_on_ranks(*threads_, comms_, "data-parallel", &dead_, nullptr, fn);
}

Status DataParallelGroup::synchronize() {
  return on_all_ranks([&](int r) {
    backend(r).synchronize();
    return Status();
  });
}

Status DataParallelGroup::split(std::span<const TrainBatch> in) {
  const int n = size(), world = world_;
  parts_.resize(size_t(n));
  for (auto& p : parts_) p.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const TrainBatch& b = in[i];
    if (b.batch <= 0 || b.batch % world != 0)
      return invalid_argument("train batch: " + std::to_string(b.batch) + " rows do not split evenly over " +
                              std::to_string(world) + " data-parallel ranks");
    const int rows = b.batch / world;
    for (int r = 0; r < n; ++r) {
      const int g = first_rank_ + r;  // this rank's rows are its global rank's
      parts_[size_t(r)][i] = world == 1 ? b : batch_rows(b, g * rows, (g + 1) * rows);
    }
  }
  return {};
}

Result<StepResult> DataParallelGroup::step(std::span<const TrainBatch> micro, double lr, double max_grad_norm,
                                           const LossOptions& loss) {
  ASTRAI_RETURN_IF_ERROR(split(micro));
  StepResult out;
  for (const TrainBatch& b : micro) out.targets += b.num_targets();
  if (out.targets == 0) return out;
  const double total = double(out.targets);
  std::vector<double> loss_sums(ranks_.size(), 0.0);
  const Status s = on_all_ranks([&](int r) -> Status {
    TrainModel& m = model(r);
    auto local = [&]() -> Status {
      m.zero_grad();
      for (const TrainBatch& b : parts_[size_t(r)]) {
        const int64_t n = b.num_targets();
        if (n == 0) continue;
        ASTRAI_ASSIGN_OR_RETURN(const float l, m.forward_backward(b, float(double(n) / total), loss));
        loss_sums[size_t(r)] += double(l) * double(n);
      }
      return {};
    };
    if (comms_.empty()) {
      ASTRAI_RETURN_IF_ERROR(local());
    } else {
      Status ok = comms_[size_t(r)]->agree(local());
      if (link_) ok = agree_across_nodes(r, ok);
      ASTRAI_RETURN_IF_ERROR(ok);
      comms_[size_t(r)]->all_reduce_sum(m.flat_grads());
    }
    const double norm = optimizer(r).step(m.params(), lr, max_grad_norm);
    if (r == 0) out.grad_norm = norm;
    return {};
  });
  // A lost node is why a step fails, whatever the ranks saw of it (an aborted all-reduce).
  if (!s.ok() && link_ && !link_->status().ok()) return link_->status();
  ASTRAI_RETURN_IF_ERROR(s);
  ASTRAI_ASSIGN_OR_RETURN(out.loss_sum, sum_over_nodes(loss_sums));
  return out;
}

Status DataParallelGroup::agree_across_nodes(int r, const Status& mine) {
  if (r == 0) node_status_ = link_->agree(mine);
  // Publishes node_status_ to the other local ranks; rank 0 writes it again only after every rank
  // has passed the next step's local agree, so after they read it.
  comms_[size_t(r)]->barrier();
  return node_status_;
}

Result<double> DataParallelGroup::sum_over_nodes(std::span<const double> mine) {
  std::vector<double> all(mine.begin(), mine.end());
  if (link_) {
    ASTRAI_ASSIGN_OR_RETURN(all, link_->gather_doubles(mine));
  }
  double sum = 0;
  for (double x : all) sum += x;
  return sum;
}

Result<std::pair<double, int64_t>> DataParallelGroup::loss_sum(const TrainBatch& batch,
                                                               const LossOptions& loss) {
  ASTRAI_RETURN_IF_ERROR(split(std::span(&batch, 1)));
  std::vector<double> sums(ranks_.size(), 0.0);
  std::vector<int64_t> targets(ranks_.size(), 0);
  ASTRAI_RETURN_IF_ERROR(on_all_ranks([&](int r) -> Status {
    const TrainBatch& b = parts_[size_t(r)][0];
    const int64_t n = b.num_targets();
    if (n == 0) return {};
    ASTRAI_ASSIGN_OR_RETURN(const float l, model(r).loss(b, loss));
    sums[size_t(r)] = double(l) * double(n);
    targets[size_t(r)] = n;
    return {};
  }));
  std::vector<double> counts(targets.begin(), targets.end());  // exact below 2^53
  ASTRAI_ASSIGN_OR_RETURN(const double sum, sum_over_nodes(sums));
  ASTRAI_ASSIGN_OR_RETURN(const double count, sum_over_nodes(counts));
  return std::pair<double, int64_t>{sum, int64_t(count)};
}

}  // namespace astrai::train
