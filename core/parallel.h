// The host thread pool in one function (the CPU backend, the CUDA backend's host copies, the
// benchmark probes and the viewer's maps): work items handed out through an atomic counter
// to one thread per core (the calling thread is one of them), so uneven items (causal rows, the
// last short block) still spread over the cores. An exception in any worker (std::bad_alloc
// included) stops the others at their next item and is rethrown as it was, after the join.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace attnlab {

// Threads worth starting for `items` work items of `flops` floating-point operations in all:
// below ~2 MFLOP a thread start costs more than it saves.
inline unsigned worker_count(std::size_t items, double flops) {
  if (flops < 2e6 || items < 2) return 1;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::min<std::size_t>(hw, items));
}

// Calls body(worker, item) for every item in [0, items), worker in [0, workers).
template <class Body>
void parallel_items(std::size_t items, unsigned workers, Body&& body) {
  workers = std::max(1u, workers);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(workers);
  auto work = [&](unsigned id) {
    try {
      for (std::size_t it = next++; it < items && !failed; it = next++) body(id, it);
    } catch (...) {
      errors[id] = std::current_exception();
      failed = true;
    }
  };
  if (workers == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    pool.reserve(workers - 1);
    for (unsigned id = 1; id < workers; ++id) pool.emplace_back(work, id);
    work(0);
    for (auto& th : pool) th.join();
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace attnlab
