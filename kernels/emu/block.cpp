// The block scheduler of the CPU emulation of CUDA (kernels/emu/README.md): every CUDA thread of
// a block is a fiber (Boost.Context) that gives way only at a barrier or a warp collective. The
// scheduler runs the block in rounds: each runnable thread, in the options' order, runs until it
// waits or exits; then the barriers whose threads have all arrived complete, warp collectives
// first. What a GPU would turn into a hang or an undefined value fails here, naming the kernel,
// the block and the threads.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "kernels/emu/grid.hpp"
#include "kernels/emu/order.hpp"
#include "kernels/emu/shared_race_detector.hpp"
#include "strata_emu.hpp"

namespace strata::emu {
namespace detail {

thread_local uint3 thread_index{};
thread_local uint3 block_index{};
thread_local dim3 block_shape{};
thread_local dim3 grid_shape{};

}  // namespace detail

namespace {

namespace context = boost::context;

// Fresh shared memory holds this byte everywhere: a NaN in fp32 and bf16 to whoever reads it
// before writing it.
constexpr std::byte kPoison{0xFF};
constexpr size_t kSharedAlignment = 128;

// Fiber stacks of 256 KiB with a guard page below each, mapped once and reused by every block
// of every host thread (a block has at most 1024 threads, so while the device lock serializes
// the threads at most 1024 stacks are in use). Only the pages a thread touches take memory. One
// pool for the process, not one per host thread: each stack is two mappings, and pools of
// threads that come and go (a run's rank threads) would reach the kernel's map count limit
// (vm.max_map_count, 65530 by default).
class StackPool {
 public:
  static constexpr size_t kStackBytes = 256 * 1024;

  context::stack_context allocate() {
    const std::lock_guard lock(mutex_);
    if (free_.empty()) map_stack();
    std::byte* base = free_.back();
    free_.pop_back();
    context::stack_context stack;
    stack.size = kStackBytes;
    stack.sp = base + page_bytes_ + kStackBytes;  // stacks grow down from here
    return stack;
  }

  void deallocate(context::stack_context& stack) {
    const std::lock_guard lock(mutex_);
    free_.push_back(static_cast<std::byte*>(stack.sp) - kStackBytes - page_bytes_);
  }

 private:
  void map_stack() {
    void* memory = mmap(nullptr, page_bytes_ + kStackBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    mprotect(memory, page_bytes_, PROT_NONE);  // an overflow faults instead of corrupting
    free_.push_back(static_cast<std::byte*>(memory));
  }

  size_t page_bytes_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::mutex mutex_;
  std::vector<std::byte*> free_;
};

// Boost.Context's stack allocator over the process's pool.
struct PooledStack {
  StackPool* pool;
  context::stack_context allocate() { return pool->allocate(); }
  void deallocate(context::stack_context& stack) { pool->deallocate(stack); }
};

StackPool& stack_pool() {
  static StackPool pool;
  return pool;
}

enum class Wait { kRunnable, kBlockBarrier, kWarpCollective, kExited };

struct AsyncCopy {
  std::byte* destination;
  const std::byte* source;
};

struct Thread {
  int linear = 0;  // x fastest, then y, then z
  uint3 index{};
  context::fiber fiber;
  Wait wait = Wait::kRunnable;
  // At a __syncthreads: where.
  const char* barrier_file = nullptr;
  int barrier_line = 0;
  // At a warp collective: which, and this lane's part of it.
  const char* collective = nullptr;
  unsigned mask = 0;
  void* operands = nullptr;
  detail::CollectiveCompletion complete = nullptr;
  std::vector<AsyncCopy> copies;  // cp.async copies not yet waited for
};

std::string hex(unsigned value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

std::string coordinates(uint3 index) {
  return "(" + std::to_string(index.x) + "," + std::to_string(index.y) + "," +
         std::to_string(index.z) + ")";
}

size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

void land(std::vector<AsyncCopy>& copies) {
  for (const AsyncCopy& copy : copies) std::memcpy(copy.destination, copy.source, 16);
  copies.clear();
}

// One launch being run: its blocks one after another, the threads of each as fibers.
class GridRun {
 public:
  explicit GridRun(const GridLaunch& launch)
      : launch_(launch),
        threads_per_block_(static_cast<int>(launch.block.x * launch.block.y * launch.block.z)),
        shared_(new (std::align_val_t{kSharedAlignment}) std::byte[kSharedBytesPerBlock]),
        static_begin_(align_up(launch.dynamic_shared_bytes, kSharedAlignment)),
        shared_used_(static_begin_),
        racecheck_(options().racecheck) {}
  ~GridRun() {
    threads_.clear();  // unwinds the fibers still waiting, after a failure
    operator delete[](shared_, std::align_val_t{kSharedAlignment});
  }
  GridRun(const GridRun&) = delete;
  GridRun& operator=(const GridRun&) = delete;

  void run() {
    detail::grid_shape = launch_.grid;
    detail::block_shape = launch_.block;
    const dim3 g = launch_.grid;
    const int64_t blocks = int64_t{g.x} * g.y * g.z;
    for (const int64_t b : visit_order(blocks)) {
      run_block({static_cast<unsigned>(b % g.x), static_cast<unsigned>(b / g.x % g.y),
                 static_cast<unsigned>(b / (int64_t{g.x} * g.y))});
    }
  }

  // "kernel K, block (x,y,z)[, thread (x,y,z)]" for failure messages.
  std::string where() const {
    std::string text = "kernel " + launch_.kernel_name + ", block " + coordinates(block_);
    if (current_ != nullptr) text += ", thread " + coordinates(current_->index);
    return text;
  }
  [[noreturn]] void fail_here(const std::string& message) const { fail(where() + ": " + message); }

  Thread& current(const char* what) {
    if (current_ == nullptr) fail_here(std::string(what) + " called outside a thread");
    return *current_;
  }

  void wait_at_block_barrier(const char* file, int line) {
    Thread& thread = current("__syncthreads");
    thread.wait = Wait::kBlockBarrier;
    thread.barrier_file = file;
    thread.barrier_line = line;
    yield();
  }

  void wait_at_collective(const char* name, unsigned mask, void* operands,
                          detail::CollectiveCompletion complete) {
    Thread& thread = current(name);
    const int lane = thread.linear % 32;
    if ((mask >> lane & 1u) == 0) {
      fail_here(std::string(name) + ": the mask " + hex(mask) + " does not name the calling lane " +
                std::to_string(lane));
    }
    thread.wait = Wait::kWarpCollective;
    thread.collective = name;
    thread.mask = mask;
    thread.operands = operands;
    thread.complete = complete;
    yield();
  }

  int lane() { return current("a warp shuffle").linear % 32; }

  std::byte* static_shared(const void* key, size_t bytes, size_t alignment) {
    for (const auto& [declaration, offset] : statics_) {
      if (declaration == key) return shared_ + offset;
    }
    const size_t offset = align_up(shared_used_, std::max<size_t>(alignment, 16));
    const size_t end = offset + bytes;
    if (end - static_begin_ > kStaticSharedBytes) {
      fail_here("static shared memory of " + std::to_string(end - static_begin_) +
                " bytes is over 48 KiB, which nvcc refuses");
    }
    if (end > kSharedBytesPerBlock) {
      fail_here("static (" + std::to_string(end - static_begin_) + " bytes) and dynamic (" +
                std::to_string(launch_.dynamic_shared_bytes) +
                " bytes) shared memory are over the 227 KiB a block may have");
    }
    std::memset(shared_ + shared_used_, static_cast<int>(kPoison), end - shared_used_);
    shared_used_ = end;
    statics_.emplace_back(key, offset);
    return shared_ + offset;
  }

  std::byte* dynamic_shared() { return shared_; }

  unsigned shared_offset(const void* pointer, const char* what) const {
    const auto* byte = static_cast<const std::byte*>(pointer);
    if (byte < shared_ || byte >= shared_ + shared_used_) {
      fail_here(std::string(what) + ": the address is not in the block's shared memory");
    }
    return static_cast<unsigned>(byte - shared_);
  }

  void copy_async16(void* destination, const void* source) {
    Thread& thread = current("cp.async");
    detail::check_aligned16(destination, "cp.async destination");
    detail::check_aligned16(source, "cp.async source");
    if (shared_offset(destination, "cp.async destination") + 16 > shared_used_) {
      fail_here("cp.async: the destination's 16 bytes run past the block's shared memory");
    }
    thread.copies.push_back(
        {static_cast<std::byte*>(destination), static_cast<const std::byte*>(source)});
  }

  void wait_async_copies() { land(current("cp.async.wait_group").copies); }

 private:
  void yield() { scheduler_ = std::move(scheduler_).resume(); }

  void run_block(uint3 block) {
    block_ = block;
    detail::block_index = block;
    std::memset(shared_, static_cast<int>(kPoison), shared_used_);
    const dim3 shape = launch_.block;
    threads_.clear();
    threads_.resize(static_cast<size_t>(threads_per_block_));
    for (int i = 0; i < threads_per_block_; ++i) {
      Thread& thread = threads_[static_cast<size_t>(i)];
      thread.linear = i;
      thread.index = {i % shape.x, i / shape.x % shape.y, i / (shape.x * shape.y)};
      thread.fiber = context::fiber(std::allocator_arg, PooledStack{&stack_pool()},
                                    [this, i](context::fiber&& scheduler) {
                                      scheduler_ = std::move(scheduler);
                                      run_thread(threads_[static_cast<size_t>(i)]);
                                      return std::move(scheduler_);
                                    });
    }
    exited_ = 0;
    if (racecheck_) races_.start_block(threads_per_block_);
    while (true) {
      for (const int64_t i : visit_order(threads_per_block_)) {
        Thread& thread = threads_[static_cast<size_t>(i)];
        if (thread.wait == Wait::kRunnable) resume(thread);
      }
      if (exited_ == threads_per_block_) break;
      if (!complete_warp_collectives()) complete_block_barrier();
    }
  }

  void run_thread(Thread& thread) {
    try {
      launch_.body();
    } catch (const context::detail::forced_unwind&) {
      throw;  // a fiber destroyed while it waits: let Boost.Context unwind it
    } catch (...) {
      error_ = std::current_exception();
    }
    land(thread.copies);
    thread.wait = Wait::kExited;
    ++exited_;
  }

  void resume(Thread& thread) {
    current_ = &thread;
    detail::thread_index = thread.index;
    if (racecheck_) races_.before_segment(shared_, shared_used_);
    thread.fiber = std::move(thread.fiber).resume();
    if (error_) {
      current_ = nullptr;
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
    if (racecheck_) {
      if (const auto race = races_.after_segment(thread.linear, shared_, shared_used_, kPoison)) {
        fail_here("a shared-memory write-write race: threads " +
                  coordinates(threads_[static_cast<size_t>(race->first_thread)].index) + " and " +
                  coordinates(threads_[static_cast<size_t>(race->second_thread)].index) +
                  " both wrote byte " + std::to_string(race->offset) +
                  " of shared memory with no barrier ordering them");
      }
    }
    current_ = nullptr;
  }

  std::string describe_collective(const Thread& thread) const {
    return "thread " + coordinates(thread.index) + " (lane " + std::to_string(thread.linear % 32) +
           ") waits at " + thread.collective + " with mask " + hex(thread.mask);
  }

  // Completes every warp collective whose lanes have all arrived; whether any did.
  bool complete_warp_collectives() {
    bool progressed = false;
    const int n = threads_per_block_;
    for (int first = 0; first < n; first += 32) {
      unsigned completed = 0;
      for (int lane = 0; lane < 32 && first + lane < n; ++lane) {
        const Thread& thread = threads_[static_cast<size_t>(first + lane)];
        if (thread.wait != Wait::kWarpCollective || (completed >> lane & 1u) != 0) continue;
        if (try_complete(thread, first)) {
          completed |= thread.mask;
          progressed = true;
        }
      }
    }
    return progressed;
  }

  // Completes thread's collective if every lane of its mask waits at it; fails on a lane that
  // exited or waits at another collective.
  bool try_complete(const Thread& thread, int first) {
    const int n = threads_per_block_;
    void* operands[32] = {};
    for (int lane = 0; lane < 32; ++lane) {
      if ((thread.mask >> lane & 1u) == 0) continue;
      if (first + lane >= n) {
        fail_here(describe_collective(thread) + ", but lane " + std::to_string(lane) +
                  " does not exist: the block has " + std::to_string(n) + " threads");
      }
      const Thread& other = threads_[static_cast<size_t>(first + lane)];
      if (other.wait == Wait::kExited) {
        fail_here(describe_collective(thread) + ", but lane " + std::to_string(lane) +
                  ", named in the mask, has exited");
      }
      if (other.wait != Wait::kWarpCollective) return false;
      if (other.mask != thread.mask || other.complete != thread.complete ||
          std::strcmp(other.collective, thread.collective) != 0) {
        fail_here(describe_collective(thread) + " while " + describe_collective(other) +
                  ": divergent warp collectives");
      }
      operands[lane] = other.operands;
    }
    const unsigned mask = thread.mask;
    thread.complete(operands);
    for (int lane = 0; lane < 32; ++lane) {
      if ((mask >> lane & 1u) != 0)
        threads_[static_cast<size_t>(first + lane)].wait = Wait::kRunnable;
    }
    if (racecheck_) races_.warp_synchronized(first / 32, mask);
    return true;
  }

  // Completes the __syncthreads every remaining thread waits at, or fails: a thread waiting at a
  // warp collective for lanes at the barrier, a thread that exited, or another barrier.
  void complete_block_barrier() {
    const Thread* waiting = nullptr;
    const Thread* exited = nullptr;
    for (const Thread& thread : threads_) {
      if (thread.wait == Wait::kWarpCollective) {
        fail_here(describe_collective(thread) +
                  " for lanes that wait at __syncthreads: a barrier in divergent code");
      }
      if (thread.wait == Wait::kExited && exited == nullptr) exited = &thread;
      if (thread.wait != Wait::kBlockBarrier) continue;
      if (waiting == nullptr) {
        waiting = &thread;
      } else if (thread.barrier_line != waiting->barrier_line ||
                 std::strcmp(thread.barrier_file, waiting->barrier_file) != 0) {
        fail_here("divergent __syncthreads: thread " + coordinates(waiting->index) + " waits at " +
                  waiting->barrier_file + ":" + std::to_string(waiting->barrier_line) +
                  ", thread " + coordinates(thread.index) + " at " + thread.barrier_file + ":" +
                  std::to_string(thread.barrier_line));
      }
    }
    if (exited != nullptr) {
      fail_here("divergent __syncthreads: thread " + coordinates(waiting->index) + " waits at " +
                waiting->barrier_file + ":" + std::to_string(waiting->barrier_line) +
                " but thread " + coordinates(exited->index) +
                " has exited; every thread of the block must reach each __syncthreads");
    }
    for (Thread& thread : threads_) thread.wait = Wait::kRunnable;
    if (racecheck_) races_.block_synchronized();
  }

  const GridLaunch& launch_;
  const int threads_per_block_;
  std::byte* shared_;  // kSharedBytesPerBlock: dynamic at 0, static from static_begin_
  const size_t static_begin_;
  size_t shared_used_;
  std::vector<std::pair<const void*, size_t>> statics_;  // declaration key, offset
  uint3 block_{};
  std::vector<Thread> threads_;
  int exited_ = 0;
  Thread* current_ = nullptr;
  context::fiber scheduler_;  // where a thread's fiber returns to when it waits
  std::exception_ptr error_;  // thrown by a thread's code, rethrown by the scheduler
  const bool racecheck_;
  SharedRaceDetector races_;
};

thread_local GridRun* running = nullptr;

GridRun& running_grid(const char* what) {
  if (running == nullptr) fail(std::string(what) + " called outside a kernel");
  return *running;
}

}  // namespace

void run_grid(const GridLaunch& launch) {
  GridRun grid(launch);
  running = &grid;
  try {
    grid.run();
  } catch (...) {
    running = nullptr;
    throw;
  }
  running = nullptr;
}

namespace detail {

void fail_in_kernel(const std::string& message) {
  if (running == nullptr) fail(message);
  running->fail_here(message);
}

void sync_block(const char* file, int line) {
  running_grid("__syncthreads").wait_at_block_barrier(file, line);
}

void warp_collective(const char* name, unsigned mask, void* operands,
                     CollectiveCompletion complete) {
  running_grid(name).wait_at_collective(name, mask, operands, complete);
}

int lane_index() { return running_grid("a warp shuffle").lane(); }

std::byte* static_shared(const void* key, size_t bytes, size_t alignment) {
  return running_grid("a __shared__ declaration").static_shared(key, bytes, alignment);
}

std::byte* dynamic_shared() { return running_grid("extern __shared__").dynamic_shared(); }

unsigned shared_offset(const void* pointer, const char* what) {
  return running_grid(what).shared_offset(pointer, what);
}

void check_aligned16(const void* pointer, const char* what) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  if (address % 16 != 0) {
    char text[32];
    std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(address));
    fail_in_kernel(std::string(what) + ": address " + text + " is not 16-byte aligned");
  }
}

void copy_async16(void* shared_destination, const void* global_source) {
  running_grid("cp.async").copy_async16(shared_destination, global_source);
}

void wait_async_copies() { running_grid("cp.async.wait_group").wait_async_copies(); }

}  // namespace detail
}  // namespace strata::emu
