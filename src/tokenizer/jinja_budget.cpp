#include "src/tokenizer/jinja_budget.h"

#include <algorithm>

namespace astrai::jinja {
namespace {

thread_local Budget* t_budget = nullptr;
thread_local int t_walk_depth = 0;

[[noreturn]] void over(const std::string& what, const std::string& limit, uint64_t value) {
  throw LimitError(what + " (" + limit + " = " + std::to_string(value) + ")");
}

}  // namespace

Budget::Budget(const ChatTemplateLimits& limits) : limits_(limits), meter_(std::make_shared<MemoryMeter>()) {}

Budget::~Budget() {
  // Namespaces may hold each other (or lists holding them) in cycles; emptying every one frees the
  // cycles, and since all of them are still held here, no destructor recurses through a namespace.
  for (const auto& ns : namespaces_) ns->attrs.items.clear();
}

void Budget::steps(uint64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps) over("rendering took too many steps", "max_steps", limits_.max_steps);
}

void Budget::string_bytes(size_t n) {
  if (n > limits_.max_output_bytes)
    over("a string grew too long while rendering", "max_output_bytes", limits_.max_output_bytes);
  steps(n / 64);
}

void Budget::add_memory(size_t n) {
  meter_->live += n;
  if (meter_->live > limits_.max_memory_bytes)
    over("rendering used too much memory", "max_memory_bytes", limits_.max_memory_bytes);
}

void Budget::check_room_for(size_t n) const {
  if (n > limits_.max_memory_bytes - std::min(meter_->live, limits_.max_memory_bytes))
    over("rendering used too much memory", "max_memory_bytes", limits_.max_memory_bytes);
}

void Budget::keep_namespace(std::shared_ptr<ObjectData> ns) {
  add_memory(512);  // kept to the end of the render: counted once, never given back
  namespaces_.push_back(std::move(ns));
}

BudgetScope::BudgetScope(Budget& b) : saved_(t_budget) {
  t_budget = &b;
}
BudgetScope::~BudgetScope() {
  t_budget = saved_;
}

Budget* current_budget() {
  return t_budget;
}

void charge_steps(uint64_t n) {
  if (t_budget) t_budget->steps(n);
}

void charge_scan(size_t bytes) {
  if (t_budget) t_budget->steps(bytes / 64);
}

void check_text_size(size_t size) {
  if (t_budget && size > t_budget->limits().max_output_bytes)
    over("a string grew too long while rendering", "max_output_bytes", t_budget->limits().max_output_bytes);
}

void check_room_for(size_t bytes) {
  if (t_budget) t_budget->check_room_for(bytes);
}

int max_value_depth() {
  return t_budget ? t_budget->limits().max_value_depth : ChatTemplateLimits{}.max_value_depth;
}

WalkDepth::WalkDepth() {
  if (++t_walk_depth > max_value_depth()) {
    --t_walk_depth;
    over("value nested too deeply", "max_value_depth", uint64_t(max_value_depth()));
  }
}
WalkDepth::~WalkDepth() {
  --t_walk_depth;
}

}  // namespace astrai::jinja
