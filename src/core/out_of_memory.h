// OutOfMemory: what the allocators (Buffer::host, Backend::alloc) throw when memory runs out.
#pragma once

#include <cstddef>
#include <new>
#include <string>
#include <utility>

namespace astrai {

// What an allocator throws when memory runs out: a std::bad_alloc (so `catch (const std::bad_alloc&)`
// still takes it) whose what() says how much was asked of which memory, and how much was free where
// the allocator knows, so that an error built on it tells the user what did not fit.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// A byte count for such messages: "1.50 GiB" from 1 GiB up, else "48.0 MiB".
std::string memory_size(size_t bytes);

}  // namespace astrai
