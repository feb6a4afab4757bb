// Giving host memory back to the system without freeing the allocation: the KV pool's pages after
// a cache flush (sched/step_runner.cpp).
#pragma once

#include <cstddef>

namespace astrai {

// Every whole OS page inside [data, data + bytes) goes back to the kernel: it no longer counts as
// resident and reads as zeros when touched again (private anonymous memory, as Buffer::host's is).
// The partial pages at either end may hold live data and stay as they are. Advice only: a failure
// leaves the memory resident and changes nothing else.
void discard_host_pages(void* data, size_t bytes);

}  // namespace astrai
