#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "src/core/threads.h"
#include "src/dist/communicator.h"
#include "src/dist/rank_threads.h"
#include "src/model/weights.h"

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
  if (o.bucket_bytes < 0) return invalid_argument("bucket_bytes: must not be negative");
  std::unique_ptr<DataParallelGroup> g(new DataParallelGroup());
  g->ranks_.resize(size_t(o.dp));
  g->world_ = o.dp * o.nodes.nnodes;
  g->first_rank_ = o.dp * o.nodes.node_rank;
  // The layout's size decides the slices; every rank's model has the same.
  g->numel_ = 0;
  for (const auto& [name, shape] : weight_shapes(config)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    g->numel_ += n;
  }
  // Slices of the world (every node's ranks): the gradient norm adds their squares in global rank
  // order, so it has the same bits however the world is laid out over processes.
  g->slice_ = g->world_ == 1 ? g->numel_ : g->numel_ / (g->world_ * kShardAlign) * kShardAlign;
  g->zero_ = o.dp > 1 && o.zero && o.nodes.nnodes == 1;  // slices are this process's ranks'
  if (o.dp > 1 && o.bucket_bytes > 0) g->buckets_ = g->make_buckets(o.bucket_bytes / int64_t(sizeof(float)));
  g->threads_ = std::make_unique<RankThreads>(o.dp);
  // Each rank's CPU backend runs its ops with its share of the threads, on whichever thread calls
  // them (rank 0's is made on this thread). dp 1 keeps the whole machine (threads 0).
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
    if (!g->zero_) {
      rank.opt->init(rank.model->params());
      return {};
    }
    std::vector<ElementRange> owned;
    for (const ElementRange& e : {g->slice(r), g->tail()})
      if (e.size() > 0) owned.push_back(e);
    rank.opt->init(rank.model->params(), std::move(owned));
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

ElementRange DataParallelGroup::slice(int rank) const {
  return {rank * slice_, (rank + 1) * slice_};
}

ElementRange DataParallelGroup::tail() const {
  return {world_ * slice_, numel_};
}

// From the end of the layout (the backward's order) down to 0: cut every `elems` elements and at
// the slices' boundaries, so that with zero each bucket lies in one rank's slice or in the tail.
std::vector<DataParallelGroup::Bucket> DataParallelGroup::make_buckets(int64_t elems) const {
  std::vector<int64_t> cuts;
  for (int64_t at = numel_; at > 0; at -= std::max<int64_t>(elems, 1)) cuts.push_back(at);
  cuts.push_back(0);
  if (zero_)
    for (int r = 0; r <= size(); ++r) cuts.push_back(r * slice_);
  std::sort(cuts.begin(), cuts.end(), std::greater<>());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Bucket> out;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const ElementRange e{cuts[i + 1], cuts[i]};
    out.push_back({e, zero_ && e.end <= tail().begin ? int(e.begin / slice_) : -1});
  }
  return out;
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
  std::vector<double> loss_sums(ranks_.size(), 0.0);
  const Status s = on_all_ranks([&](int r) -> Status {
    ASTRAI_ASSIGN_OR_RETURN(const double norm,
                            rank_step(r, double(out.targets), lr, max_grad_norm, loss, loss_sums[size_t(r)]));
    if (r == 0) out.grad_norm = norm;
    return {};
  });
  // A lost node is why a step fails, whatever the ranks saw of it (an aborted all-reduce).
  if (!s.ok() && link_ && !link_->status().ok()) return link_->status();
  ASTRAI_RETURN_IF_ERROR(s);
  ASTRAI_ASSIGN_OR_RETURN(out.loss_sum, sum_over_nodes(loss_sums));
  return out;
}

namespace {

// Thrown by the grad-ready hook out of a backward whose step another rank failed (the agreement).
struct AgreedFailure {
  Status status;
};

double sum_squares(Backend& be, const Tensor& flat, ElementRange e) {
  return e.size() > 0 ? be.sum_squares({flat.rows(e.begin, e.end)}) : 0.0;
}

}  // namespace

void DataParallelGroup::reduce(Communicator& c, const Tensor& grads, const Bucket& b) {
  const Tensor t = grads.rows(b.range.begin, b.range.end);
  if (b.owner < 0)
    c.all_reduce_sum(t);
  else
    c.reduce_sum(t, b.owner);
}

Result<double> DataParallelGroup::rank_step(int r, double total, double lr, double max_grad_norm,
                                            const LossOptions& loss, double& loss_sum) {
  TrainModel& m = model(r);
  Backend& be = backend(r);
  const std::vector<TrainBatch>& parts = parts_[size_t(r)];
  auto local = [&](const std::function<void(size_t)>& before) -> Status {
    m.zero_grad();
    for (size_t i = 0; i < parts.size(); ++i) {
      const int64_t n = parts[i].num_targets();
      if (n == 0) continue;
      before(i);
      ASTRAI_ASSIGN_OR_RETURN(const float l, m.forward_backward(parts[i], float(double(n) / total), loss));
      loss_sum += double(l) * double(n);
    }
    return {};
  };
  if (comms_.empty()) {
    ASTRAI_RETURN_IF_ERROR(local([](size_t) {}));
    return optimizer(r).step(m.params(), lr, max_grad_norm);
  }

  Communicator& c = *comms_[size_t(r)];
  const Tensor grads = m.flat_grads();
  // With buckets, the last micro-batch's backward reduces each bucket once its gradients are final;
  // the ranks agree that every forward succeeded before the first (a rank that failed must not leave
  // the others in a collective). A rank whose last micro-batch has no target reduces them after.
  bool agreed = false;
  size_t launched = 0;
  auto launch_ready = [&](int64_t from) {
    if (launched == buckets_.size() || buckets_[launched].range.begin < from) return;
    c.fork_side();  // after the backward queued so far
    for (; launched < buckets_.size() && buckets_[launched].range.begin >= from; ++launched)
      reduce(c, grads, buckets_[launched]);
  };
  auto agree = [&](const Status& mine) {
    agreed = true;
    const Status all = c.agree(mine);
    return link_ ? agree_across_nodes(r, all) : all;
  };
  Status mine;
  try {
    mine = local([&](size_t i) {
      if (buckets_.empty() || i + 1 != parts.size()) return;
      m.set_grad_ready_hook([&](int64_t from) {
        if (!agreed)
          if (Status all = agree(Status()); !all.ok()) throw AgreedFailure{std::move(all)};
        launch_ready(from);
      });
    });
  } catch (AgreedFailure& f) {
    m.set_grad_ready_hook(nullptr);
    return f.status;
  } catch (...) {
    m.set_grad_ready_hook(nullptr);
    throw;
  }
  m.set_grad_ready_hook(nullptr);
  if (!agreed) {
    ASTRAI_RETURN_IF_ERROR(agree(mine));
  } else if (!mine.ok()) {
    throw Error(mine);  // after this rank's collectives began: a failure in the middle of the step
  }

  const ElementRange own = slice(r), rest = tail();
  if (!buckets_.empty()) {
    launch_ready(0);
    c.join_side();
  } else if (zero_) {
    if (own.size() > 0) c.reduce_scatter_sum(grads.rows(0, rest.begin), grads.rows(own.begin, own.end));
    if (rest.size() > 0) c.all_reduce_sum(grads.rows(rest.begin, rest.end));
  } else {
    c.all_reduce_sum(grads);
  }

  // Zero: each rank holds its slice's sums, met in rank order; otherwise every rank holds the whole
  // sum and adds the world's slices itself, in the same order (the same bits either way).
  double squares = 0;
  if (zero_)
    for (double s : c.gather_values(sum_squares(be, grads, own))) squares += s;
  else
    for (int g = 0; g < world_; ++g) squares += sum_squares(be, grads, slice(g));
  squares += sum_squares(be, grads, rest);
  const double norm = std::sqrt(squares);
  optimizer(r).update(m.params(), lr, clip_scale(norm, max_grad_norm));
  if (zero_ && own.size() > 0) {
    const Tensor values = m.flat_values();
    c.all_gather(values.rows(own.begin, own.end), values.rows(0, rest.begin));
  }
  return norm;
}

Status DataParallelGroup::read_moments(std::vector<float>& exp_avg, std::vector<float>& exp_avg_sq) {
  exp_avg.assign(size_t(numel_), 0.0f);
  exp_avg_sq.assign(size_t(numel_), 0.0f);
  return on_all_ranks([&](int r) -> Status {
    const AdamW& opt = optimizer(r);
    int64_t at = 0;
    for (const ElementRange& e : opt.owned()) {
      // Every rank holds the tail (and without zero everything): rank 0 alone copies what is shared.
      const bool mine_alone = zero_ && e.begin == slice(r).begin && e.end == slice(r).end;
      if (r == 0 || mine_alone) {
        backend(r).download(exp_avg.data() + e.begin, opt.owned_exp_avg().rows(at, at + e.size()));
        backend(r).download(exp_avg_sq.data() + e.begin, opt.owned_exp_avg_sq().rows(at, at + e.size()));
      }
      at += e.size();
    }
    return Status();
  });
}

Status DataParallelGroup::write_moments(std::span<const float> exp_avg, std::span<const float> exp_avg_sq,
                                        int64_t steps_taken) {
  if (int64_t(exp_avg.size()) != numel_ || int64_t(exp_avg_sq.size()) != numel_)
    return invalid_argument("optimizer state: " + std::to_string(exp_avg.size()) +
                            " moments for a model of " + std::to_string(numel_) + " parameters");
  return on_all_ranks([&](int r) -> Status {
    AdamW& opt = optimizer(r);
    int64_t at = 0;
    for (const ElementRange& e : opt.owned()) {
      backend(r).upload(opt.owned_exp_avg().rows(at, at + e.size()), exp_avg.data() + e.begin);
      backend(r).upload(opt.owned_exp_avg_sq().rows(at, at + e.size()), exp_avg_sq.data() + e.begin);
      at += e.size();
    }
    opt.set_steps_taken(steps_taken);
    return Status();
  });
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
