#include "sched/radix_cache.h"

#include <cassert>
#include <functional>
#include <string>

namespace astrai {

struct PageKeyHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
    for (int32_t x : v) h = (h ^ uint32_t(x)) * 1099511628211ull;
    return size_t(h);
  }
};

struct RadixCache::Node {
  int32_t page = -1;
  std::vector<int32_t> tokens;  // the page's tokens (key in the parent's map)
  Node* parent = nullptr;
  std::unordered_map<std::vector<int32_t>, std::unique_ptr<Node>, PageKeyHash> children;
  int lock_ref = 0;
  uint64_t last_use = 0;
  bool in_lru = false;
  uint64_t lru_key = 0;  // last_use when inserted into lru_leaves_
};

RadixCache::RadixCache(KvPool& pool, int page_size) : root_(new Node), pool_(pool), page_size_(page_size) {}

RadixCache::~RadixCache() {
  // Cached pages go back to the pool (the pool may outlive the cache in tests).
  std::function<void(Node*)> drop = [&](Node* n) {
    for (auto& [k, c] : n->children) drop(c.get());
    if (n != root_) pool_.release(n->page);
  };
  drop(root_);
  delete root_;
}

int32_t RadixCache::page_of(const Node* n) {
  return n->page;
}

void RadixCache::update_lru(Node* n) {
  const bool want = n != root_ && n->lock_ref == 0 && n->children.empty();
  if (n->in_lru && (!want || n->lru_key != n->last_use)) {
    lru_leaves_.erase({n->lru_key, n});
    n->in_lru = false;
  }
  if (want && !n->in_lru) {
    n->lru_key = n->last_use;
    lru_leaves_.insert({n->lru_key, n});
    n->in_lru = true;
  }
}

std::vector<RadixCache::Node*> RadixCache::match(std::span<const int32_t> tokens, int max_pages) {
  std::vector<Node*> path;
  Node* cur = root_;
  std::vector<int32_t> key;
  const uint64_t now = ++clock_;
  for (int p = 0; p < max_pages && size_t(p + 1) * size_t(page_size_) <= tokens.size(); ++p) {
    key.assign(tokens.begin() + p * page_size_, tokens.begin() + (p + 1) * page_size_);
    auto it = cur->children.find(key);
    if (it == cur->children.end()) break;
    cur = it->second.get();
    cur->last_use = now;
    update_lru(cur);
    path.push_back(cur);
  }
  return path;
}

RadixCache::Node* RadixCache::insert(Node* parent, std::span<const int32_t> page_tokens, int32_t page) {
  assert(int(page_tokens.size()) == page_size_);
  if (!parent) parent = root_;
  std::vector<int32_t> key(page_tokens.begin(), page_tokens.end());
  if (parent->children.count(key)) return nullptr;
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  n->page = page;
  n->tokens = key;
  n->parent = parent;
  n->lock_ref = 1;
  n->last_use = ++clock_;
  parent->children.emplace(std::move(key), std::move(node));
  pool_.retain(page);
  ++num_nodes_;
  update_lru(parent);  // the parent is no longer a leaf
  return n;
}

void RadixCache::lock(Node* n) {
  if (n->lock_ref++ == 0) --num_unlocked_;
  update_lru(n);
}

void RadixCache::unlock(Node* n) {
  assert(n->lock_ref > 0);
  if (--n->lock_ref == 0) ++num_unlocked_;
  n->last_use = ++clock_;
  update_lru(n);
}

int RadixCache::evict(int n) {
  int evicted = 0;
  while (evicted < n && !lru_leaves_.empty()) {
    Node* leaf = lru_leaves_.begin()->second;
    lru_leaves_.erase(lru_leaves_.begin());
    leaf->in_lru = false;
    Node* parent = leaf->parent;
    pool_.release(leaf->page);
    --num_nodes_;
    --num_unlocked_;
    parent->children.erase(leaf->tokens);  // destroys leaf
    update_lru(parent);
    ++evicted;
  }
  return evicted;
}

Status RadixCache::check() const {
  int nodes = 0, unlocked = 0, leaves = 0;
  std::string err;
  std::function<void(const Node*, int parent_lock)> walk = [&](const Node* n, int parent_lock) {
    for (const auto& [k, c] : n->children) {
      const Node* ch = c.get();
      ++nodes;
      if (ch->lock_ref == 0) ++unlocked;
      if (ch->lock_ref < 0 && err.empty()) err = "negative lock count";
      if (n != root_ && ch->lock_ref > parent_lock && err.empty())
        err = "page " + std::to_string(ch->page) + " is locked more often than its parent";
      if (pool_.refcount(ch->page) != 1 + ch->lock_ref && err.empty())
        err = "cached page " + std::to_string(ch->page) + " has refcount " +
              std::to_string(pool_.refcount(ch->page)) + ", expected 1 + lock " +
              std::to_string(ch->lock_ref);
      if (ch->parent != n && err.empty()) err = "bad parent link";
      const bool want_lru = ch->lock_ref == 0 && ch->children.empty();
      if (want_lru) ++leaves;
      if (want_lru != ch->in_lru && err.empty()) err = "LRU membership out of date";
      walk(ch, ch->lock_ref);
    }
  };
  walk(root_, 0);
  if (!err.empty()) return internal_error("radix cache: " + err);
  if (nodes != num_nodes_) return internal_error("radix cache: node count out of date");
  if (unlocked != num_unlocked_) return internal_error("radix cache: unlocked count out of date");
  if (leaves != int(lru_leaves_.size())) return internal_error("radix cache: LRU set size out of date");
  return {};
}

std::vector<int32_t> RadixCache::pages() const {
  std::vector<int32_t> out;
  std::function<void(const Node*)> walk = [&](const Node* n) {
    for (const auto& [k, c] : n->children) {
      out.push_back(c->page);
      walk(c.get());
    }
  };
  walk(root_);
  return out;
}

}  // namespace astrai
