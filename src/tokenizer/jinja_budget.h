// The budget of one render (ChatTemplateLimits). Values are built all over the interpreter (filters,
// methods, JSON input) without a context argument, so the budget of the render running on this
// thread is found through a thread-local pointer that BudgetScope sets; outside a render there is
// none and only the depth limit applies (with its default).
//
// What is counted where:
//  - steps: every statement and expression evaluated, every loop iteration, every element a list
//    or dict is built from, every node a comparison or printing walk visits, and one step per 64
//    bytes of string built or scanned;
//  - memory: bytes of the strings, lists and dicts alive now (each gives its bytes back when freed;
//    namespaces are counted once and kept to the end of the render);
//  - depth: a list or dict deeper than max_value_depth cannot be built, so every recursive walk over
//    values (printing, tojson, comparison, destruction) is bounded. Namespaces count as depth 1:
//    they are mutable (a list can hold a namespace that later holds the list), so the render keeps
//    every namespace alive until its end and then empties them, which also frees reference cycles.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/tokenizer/chat_template_limits.h"
#include "src/tokenizer/jinja_value.h"

namespace astrai::jinja {

// A limit was hit. Separate from RenderError's other types so the boundary can say which limit.
class LimitError : public RenderError {
 public:
  explicit LimitError(const std::string& msg) : RenderError("LimitError", msg) {}
};

// Live bytes, shared with the deleters of the strings and lists a render creates (which may in
// principle outlive the Budget).
struct MemoryMeter {
  size_t live = 0;
};

class Budget {
 public:
  explicit Budget(const ChatTemplateLimits& limits);
  ~Budget();  // empties the namespaces it kept
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  const ChatTemplateLimits& limits() const { return limits_; }
  void steps(uint64_t n);
  void string_bytes(size_t n);  // a string of n bytes is about to be built (its memory: add_memory)
  void add_memory(size_t n);
  // Refuses, before anything is built, what would take the live total over max_memory_bytes.
  void check_room_for(size_t n) const;
  const std::shared_ptr<MemoryMeter>& meter() const { return meter_; }
  void keep_namespace(std::shared_ptr<ObjectData> ns);

 private:
  ChatTemplateLimits limits_;
  uint64_t steps_ = 0;
  std::shared_ptr<MemoryMeter> meter_;
  std::vector<std::shared_ptr<ObjectData>> namespaces_;
};

// Makes `b` the budget of this thread for its lifetime (scopes nest: the previous one comes back).
class BudgetScope {
 public:
  explicit BudgetScope(Budget& b);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* saved_;
};

Budget* current_budget();  // null outside a render

// Shorthands that do nothing outside a render (depth checks use the default limit there).
void charge_steps(uint64_t n);
void charge_scan(size_t bytes);  // work proportional to `bytes` of text
// A string being assembled has reached `size` bytes: over max_output_bytes is a LimitError.
void check_text_size(size_t size);
void check_room_for(size_t bytes);
int max_value_depth();

// Counts the nesting of a recursive walk over values (printing a namespace walks into it).
class WalkDepth {
 public:
  WalkDepth();
  ~WalkDepth();
  WalkDepth(const WalkDepth&) = delete;
  WalkDepth& operator=(const WalkDepth&) = delete;
};

}  // namespace astrai::jinja
