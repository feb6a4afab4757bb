// Radix prefix cache over full KV pages. The tree's edges are whole pages: a node stands for one
// page holding page_size tokens, and the path from the root spells the token prefix whose K/V the
// pages along it hold. A request whose prompt starts with a cached path reuses those pages instead
// of recomputing them (system prompts, few-shot examples, multi-turn chat).
//
// Ownership and invariants (checked by check()):
//   - the cache holds one pool reference per node (its page stays allocated while cached);
//   - every sequence that uses a cached page also locks its node (lock_ref) and holds one pool
//     reference, so refcount(page) == 1 + lock_ref for every node;
//   - a sequence that uses a node uses all its ancestors too, so an unlocked node has no locked
//     descendant, and unlocked nodes can be evicted leaf-first;
//   - eviction happens only when the pool runs out of free pages, least recently used leaf first.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/kv_pool.h"
#include "src/core/status.h"

namespace astrai {

class RadixCache {
 public:
  struct Node;

  RadixCache(KvPool& pool, int page_size);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  int page_size() const { return page_size_; }

  // The longest cached path spelling a prefix of `tokens` in whole pages, at most max_pages long.
  // Marks the path as used now (LRU). The caller locks the nodes it keeps.
  std::vector<Node*> match(std::span<const int32_t> tokens, int max_pages);

  // Adds `page`, holding `page_tokens` (exactly page_size of them), as a child of `parent`
  // (nullptr: the root). The cache takes a pool reference and the new node comes back locked once
  // for the caller. Returns nullptr when `parent` already has a child for these tokens (another
  // sequence computed the same page first): the caller keeps its private copy.
  Node* insert(Node* parent, std::span<const int32_t> page_tokens, int32_t page);

  void lock(Node* n);
  void unlock(Node* n);
  static int32_t page_of(const Node* n);

  // Evicts up to n unlocked pages (least recently used leaves first) and returns them to the pool.
  // Returns how many were evicted.
  int evict(int n);

  int cached_pages() const { return num_nodes_; }
  int evictable_pages() const { return num_unlocked_; }

  // Verifies the invariants above against the pool; the first violation as an error.
  Status check() const;
  // The page of every cached node (tests and whole-engine checks).
  std::vector<int32_t> pages() const;

 private:
  void update_lru(Node* n);
  Node* root_;
  KvPool& pool_;
  int page_size_;
  int num_nodes_ = 0;     // excluding the root
  int num_unlocked_ = 0;  // nodes with lock_ref == 0
  uint64_t clock_ = 0;
  std::set<std::pair<uint64_t, Node*>> lru_leaves_;  // unlocked leaves by last use
};

}  // namespace astrai
