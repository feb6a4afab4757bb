// Training over several processes (one per host, "node"): the TCP bootstrap that hands every node
// the collective library's unique id (NCCL's ncclUniqueId), and the connections it leaves open,
// which carry the host-side collectives between the nodes (agree, barrier, small sums) and tell a
// node at once when another one is gone. The data never goes over them: NCCL carries every
// collective on tensors.
//
// Topology: a star. Node 0 listens on master_port (every interface); node r > 0 connects to
// master_addr:master_port, retrying until timeout_s. Every message is a frame:
//   u32 magic "ASTN" | u16 version | u16 type | u32 body length | body       (little-endian)
//   hello   (node r -> 0)  u32 node rank | u64 world size | fingerprint
//   welcome (0 -> node r)  the unique id (128 bytes for NCCL)
//   reject  (0 -> node r)  why the run cannot start (sent to every node that joined)
//   round   (both ways)    one collective: node r sends its part; node 0 answers with every part
//   abort   (0 -> node r)  node 0 lost a node: why
//   heartbeat (both ways)  empty; several per silence limit from each node's link thread
// Node 0 checks every hello: the magic and version, a node rank in [1, nnodes) not taken, the same
// world size and the same fingerprint (the run's config and data), and fails the whole run (every
// node, with the same message) on a mismatch. A node whose connection closes outside close() is
// lost: every collective in flight or to come fails with an error naming it, on_lost (if set) runs
// once on the link's thread (data-parallel training aborts its NCCL communicators there: a peer's
// kernels would otherwise wait for the lost node forever), node 0 tells the other nodes, and with
// exit_after_loss_s > 0 the process ends with that error if it has not ended by then on its own.
// So is a node that sends nothing, not even a heartbeat, for the silence limit: its process is
// stopped or frozen with its connection open (the kernel still acknowledges what it is sent).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/backend/backend.h"
#include "src/core/status.h"

namespace astrai {

class Communicator;

struct NodeOptions {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Node 0: how long it waits for every node to join; node r > 0: how long it retries connecting
  // and then waits for the others.
  double timeout_s = 60;
  // After the bootstrap: a node silent this long is lost (0: timeout_s, which is what --node-timeout
  // sets; tests shorten it without shortening the bootstrap).
  double silence_s = 0;
  // > 0: once a node is lost, end the process (std::_Exit(1)) with the error after this long if it
  // has not ended by itself (a rank stuck on its device). 0: never (tests).
  double exit_after_loss_s = 0;
};

// nnodes >= 1, 0 <= node_rank < nnodes, a port in [1, 65535], a master address, timeout > 0; the
// errors name the train.yaml keys.
Status validate_node_options(const NodeOptions& o);

class NodeLink {
 public:
  // Blocks until every node has joined (or the timeout, or a mismatch). Node 0 passes `id`, the
  // bytes every node receives; the others pass an empty span. world_size and fingerprint must be
  // the same on every node.
  static Result<std::unique_ptr<NodeLink>> connect(const NodeOptions& o, int64_t world_size,
                                                   std::string_view fingerprint, std::span<const uint8_t> id);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  int nnodes() const;
  int node_rank() const;
  const std::vector<uint8_t>& id() const;

  // Host-side collectives: every node calls them in the same order, one at a time (from one thread
  // per node). They fail once a node is lost.
  // Every node's `mine`, in node order.
  Result<std::vector<std::string>> all_gather(std::string_view mine);
  // ok when every node's status is ok, else the lowest failing node's, its message prefixed
  // "node R: " on the other nodes.
  Status agree(const Status& mine);
  // Every node's values, concatenated in node order.
  Result<std::vector<double>> gather_doubles(std::span<const double> mine);
  Result<bool> any(bool mine);
  Status barrier();

  // Runs once on the link's thread when a node is lost (not after close()). Set it before the
  // first collective.
  void on_lost(std::function<void(const Status&)> fn);
  // ok, or why a node was lost.
  Status status() const;

  // The end of a run: a last barrier (node 0 has finished its checkpoint when the others leave),
  // after which a node closing its connection is not a loss.
  Status close();

  struct Impl;  // bootstrap.cpp

 private:
  explicit NodeLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What the collective library registers for crossing processes (gpu/nccl_communicator.cpp for
// Device::cuda): node 0 makes the unique id; every node then makes the communicators of its local
// ranks (backends[i] is global rank first_rank + i of world_size), which meet with every other
// node's in each collective.
struct WorldTransport {
  std::function<Result<std::vector<uint8_t>>()> make_id;
  std::function<Result<std::vector<std::unique_ptr<Communicator>>>(
      std::span<Backend* const> backends, std::span<const uint8_t> id, int world_size, int first_rank)>
      make_communicators;
};
void register_world_transport(Device device, WorldTransport transport);
// An error when `device` has none (the CPU backend: nothing crosses processes).
Result<WorldTransport> world_transport(Device device);

}  // namespace astrai
