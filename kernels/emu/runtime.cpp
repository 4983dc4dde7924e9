// The runtime of the CPU emulation of CUDA (kernels/emu/README.md): device memory, streams and
// events, and the contract with the emulated libraries (strata_emu.hpp).
//
// Device memory is host memory, tracked so that check_device_range can tell a live allocation;
// fresh allocations hold 0xFF bytes (NaNs in fp32 and bf16), so a read before a write shows.
//
// Every stream is a queue, and nothing queued runs until a synchronizing call (a stream, event
// or device synchronize, a blocking cudaMemcpy, cudaFree) needs it. Then the needed work runs
// one item at a time, in an order that respects only what CUDA promises: FIFO order within a
// stream, a cudaStreamWaitEvent after the event's cudaEventRecord, and the legacy default
// stream's implicit synchronization with blocking streams (work on the legacy stream waits for
// all earlier work on blocking streams, work on a blocking stream for earlier legacy work).
// Among the ready items the options choose the oldest, the newest or one at random, so a
// missing event gives a wrong answer in some order.
//
// Several host threads may drive the emulation (a rank each, with streams of its own): the
// device lock (strata_emu.hpp) serializes them, and queued work runs on the thread that
// synchronizes. A work item that releases the lock while it waits for other threads (Unlocked)
// stays "running": it is complete for nobody until it returns, and a thread that needs it waits.

#include <chrono>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/emu/last_error.hpp"
#include "kernels/emu/order.hpp"
#include "strata_emu.hpp"

struct CUstream_st {
  bool blocking = true;  // synchronizes with the legacy default stream
  uint64_t last_work = 0;
};

struct CUevent_st {
  bool timing = true;
  uint64_t marker = 0;  // the work item of the last cudaEventRecord, 0 before the first
  // When the marker ran (host time), shared with the queued record that sets it.
  std::shared_ptr<std::chrono::steady_clock::time_point> reached =
      std::make_shared<std::chrono::steady_clock::time_point>();
};

namespace strata::emu {
namespace {

using Clock = std::chrono::steady_clock;

// cudaMalloc's alignment: 256 bytes.
constexpr size_t kAllocationAlignment = 256;
constexpr int kPoisonByte = 0xFF;

struct Work {
  std::string what;
  std::function<void()> run;
  std::vector<uint64_t> after;  // work items that must run first
  bool on_blocking_stream = false;
};

struct Runtime {
  std::map<uint64_t, Work> pending;  // by id, which is the enqueue order
  std::set<uint64_t> running;        // taken from pending, not yet returned
  uint64_t releases = 0;             // times a thread released the device lock (Unlocked)
  uint64_t next_id = 1;
  CUstream_st legacy;
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::map<const std::byte*, size_t> allocations;  // start, bytes (looked up, never iterated)
};

Runtime& runtime() {
  static Runtime instance;
  return instance;
}

thread_local cudaError_t last_error = cudaSuccess;

std::recursive_mutex& device_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}
thread_local int lock_depth = 0;  // this thread's holds of the device mutex

// Not complete: queued, or running on some thread.
bool is_pending(uint64_t id) {
  return id != 0 && (runtime().pending.count(id) != 0 || runtime().running.count(id) != 0);
}

// The stream behind a handle (null: the legacy default stream); fails on an unknown handle.
CUstream_st& stream_of(cudaStream_t stream, const std::string& what) {
  if (stream == nullptr) return runtime().legacy;
  for (const auto& owned : runtime().streams) {
    if (owned.get() == stream) return *owned;
  }
  fail(what + ": the stream is not a live stream (destroyed, or never created)");
}

CUevent_st* event_of(cudaEvent_t event) {
  for (const auto& owned : runtime().events) {
    if (owned.get() == event) return owned.get();
  }
  return nullptr;
}

uint64_t enqueue_on(CUstream_st& stream, std::string what, std::function<void()> run,
                    uint64_t also_after = 0) {
  Runtime& r = runtime();
  Work work{std::move(what), std::move(run), {}, false};
  if (is_pending(stream.last_work)) work.after.push_back(stream.last_work);
  if (is_pending(also_after)) work.after.push_back(also_after);
  if (&stream == &r.legacy) {
    for (const auto& [id, other] : r.pending) {
      if (other.on_blocking_stream) work.after.push_back(id);
    }
  } else if (stream.blocking) {
    work.on_blocking_stream = true;
    if (is_pending(r.legacy.last_work)) work.after.push_back(r.legacy.last_work);
  }
  const uint64_t id = r.next_id++;
  stream.last_work = id;
  r.pending.emplace(id, std::move(work));
  return id;
}

// Runs targets and everything they wait for (every incomplete item when targets is empty), one
// ready item at a time in the options' order, until none of them is incomplete; items running on
// other threads (released by Unlocked) are waited for. A failure drops the rest of the queued
// work, as a fault leaves a GPU's context unusable, and propagates.
//
// The items needed and their dependencies are gathered once (Kahn's algorithm over them), and
// again whenever the device lock was released meanwhile (other threads may have run or queued
// work): the queues of a training step hold thousands of items.
void run_until(const std::vector<uint64_t>& targets) {
  const DeviceLock lock;
  Runtime& r = runtime();
  std::vector<uint64_t> goals(targets);
  if (goals.empty()) {
    for (const auto& [id, work] : r.pending) goals.push_back(id);
    goals.insert(goals.end(), r.running.begin(), r.running.end());
  }
  while (true) {
    const uint64_t releases = r.releases;
    std::set<uint64_t> needed;
    std::vector<uint64_t> to_visit(goals);
    while (!to_visit.empty()) {
      const uint64_t id = to_visit.back();
      to_visit.pop_back();
      if (!is_pending(id) || !needed.insert(id).second) continue;
      const auto queued = r.pending.find(id);
      if (queued == r.pending.end()) continue;  // running elsewhere
      for (const uint64_t before : queued->second.after) to_visit.push_back(before);
    }
    if (needed.empty()) return;
    // Per queued item, how many of its dependencies are incomplete; who waits for each.
    std::map<uint64_t, int> waiting_on;
    std::map<uint64_t, std::vector<uint64_t>> dependents;
    std::set<uint64_t> ready;  // oldest first
    for (const uint64_t id : needed) {
      const auto queued = r.pending.find(id);
      if (queued == r.pending.end()) continue;
      int count = 0;
      for (const uint64_t before : queued->second.after) {
        if (!is_pending(before)) continue;
        ++count;
        dependents[before].push_back(id);
      }
      waiting_on[id] = count;
      if (count == 0) ready.insert(id);
    }
    while (!ready.empty() && r.releases == releases) {
      const uint64_t next = *std::next(ready.begin(), static_cast<long>(pick_next(ready.size())));
      ready.erase(next);
      Work work = std::move(r.pending.at(next));
      r.pending.erase(next);
      r.running.insert(next);
      try {
        work.run();
      } catch (...) {
        r.running.erase(next);
        r.pending.clear();
        throw;
      }
      r.running.erase(next);
      for (const uint64_t waiter : dependents[next]) {
        if (--waiting_on[waiter] == 0) ready.insert(waiter);
      }
    }
    if (r.releases == releases) {
      // Nothing ready: what is left waits for items running on other threads.
      const Unlocked unlocked;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

std::byte* allocate(size_t bytes) {
  const size_t rounded =
      (bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  auto* memory = static_cast<std::byte*>(operator new[](
      rounded, std::align_val_t{kAllocationAlignment}, std::nothrow));
  if (memory == nullptr) return nullptr;
  std::memset(memory, kPoisonByte, rounded);
  runtime().allocations.emplace(memory, bytes);
  return memory;
}

void release(std::byte* memory) {
  runtime().allocations.erase(memory);
  operator delete[](memory, std::align_val_t{kAllocationAlignment});
}

bool is_allocation(const void* pointer) {
  return runtime().allocations.count(static_cast<const std::byte*>(pointer)) != 0;
}

// The ranges a copy of kind touches on the device, checked when it runs.
void check_copy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind,
                const std::string& what) {
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) {
    check_device_range(destination, bytes, what + ": the destination");
  }
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) {
    check_device_range(source, bytes, what + ": the source");
  }
}

uint64_t enqueue_copy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind,
                      CUstream_st& stream, const std::string& what) {
  return enqueue_on(stream, what, [=] {
    check_copy(destination, source, bytes, kind, what);
    std::memmove(destination, source, bytes);
  });
}

uint64_t enqueue_set(void* pointer, int value, size_t bytes, CUstream_st& stream,
                     const std::string& what) {
  return enqueue_on(stream, what, [=] {
    check_device_range(pointer, bytes, what);
    std::memset(pointer, value, bytes);
  });
}

}  // namespace

// ---- The contract with the emulated libraries (strata_emu.hpp) -------------------------------

DeviceLock::DeviceLock() {
  device_mutex().lock();
  ++lock_depth;
}

DeviceLock::~DeviceLock() {
  --lock_depth;
  device_mutex().unlock();
}

Unlocked::Unlocked() : depth_(lock_depth) {
  for (int i = 0; i < depth_; ++i) device_mutex().unlock();
  lock_depth = 0;
}

Unlocked::~Unlocked() {
  for (int i = 0; i < depth_; ++i) device_mutex().lock();
  lock_depth = depth_;
  if (depth_ > 0) ++runtime().releases;
}

void fail(const std::string& message) { throw EmulationError("CUDA emulation: " + message); }

void enqueue(cudaStream_t stream, std::string what, std::function<void()> work) {
  const DeviceLock lock;
  CUstream_st& target = stream_of(stream, what);
  enqueue_on(target, std::move(what), std::move(work));
}

void check_device_range(const void* pointer, size_t bytes, const std::string& what) {
  const DeviceLock lock;
  const auto* start = static_cast<const std::byte*>(pointer);
  const auto& allocations = runtime().allocations;
  auto after = allocations.upper_bound(start);
  if (after != allocations.begin()) {
    const auto& [base, size] = *std::prev(after);
    if (start >= base && start + bytes <= base + size) return;
  }
  fail(what + ": the " + std::to_string(bytes) +
       " bytes at the pointer are not inside one live device allocation");
}

cudaError_t returned(cudaError_t status) {
  if (status != cudaSuccess) last_error = status;
  return status;
}

}  // namespace strata::emu

using strata::emu::returned;
using strata::emu::run_until;
using strata::emu::runtime;

cudaError_t cudaGetLastError() { return std::exchange(strata::emu::last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return strata::emu::last_error; }

cudaError_t cudaDeviceSynchronize() {
  const strata::emu::DeviceLock lock;
  run_until({});
  return cudaSuccess;
}

// ---- Memory ----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  const strata::emu::DeviceLock lock;
  if (pointer == nullptr) return returned(cudaErrorInvalidValue);
  *pointer = bytes == 0 ? nullptr : strata::emu::allocate(bytes);
  return returned(bytes != 0 && *pointer == nullptr ? cudaErrorMemoryAllocation : cudaSuccess);
}

// As on a GPU, cudaFree waits for all queued work first.
cudaError_t cudaFree(void* pointer) {
  const strata::emu::DeviceLock lock;
  if (pointer == nullptr) return cudaSuccess;
  if (!strata::emu::is_allocation(pointer)) return returned(cudaErrorInvalidValue);
  run_until({});
  strata::emu::release(static_cast<std::byte*>(pointer));
  return cudaSuccess;
}

// Stream-ordered allocation: the memory exists at once; the free happens in stream order.
cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  strata::emu::stream_of(stream, "cudaMallocAsync");
  return cudaMalloc(pointer, bytes);
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  if (pointer == nullptr) return cudaSuccess;
  if (!strata::emu::is_allocation(pointer)) return returned(cudaErrorInvalidValue);
  auto* memory = static_cast<std::byte*>(pointer);
  strata::emu::enqueue(stream, "cudaFreeAsync", [memory] { strata::emu::release(memory); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind) {
  const strata::emu::DeviceLock lock;
  run_until({strata::emu::enqueue_copy(destination, source, bytes, kind, runtime().legacy,
                                       "cudaMemcpy")});
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  strata::emu::enqueue_copy(destination, source, bytes, kind,
                            strata::emu::stream_of(stream, "cudaMemcpyAsync"), "cudaMemcpyAsync");
  return cudaSuccess;
}

// cudaMemcpy2DAsync's contract (CUDA runtime API): pitches at least the width, or
// cudaErrorInvalidPitchValue; each row checked and copied when the work runs.
cudaError_t cudaMemcpy2DAsync(void* destination, size_t destination_pitch, const void* source,
                              size_t source_pitch, size_t width, size_t rows, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  if (destination_pitch < width || source_pitch < width) {
    return returned(cudaErrorInvalidPitchValue);
  }
  auto* to = static_cast<std::byte*>(destination);
  const auto* from = static_cast<const std::byte*>(source);
  const std::string what = "cudaMemcpy2DAsync";
  strata::emu::enqueue(stream, what, [=] {
    for (size_t row = 0; row < rows; ++row) {
      strata::emu::check_copy(to + row * destination_pitch, from + row * source_pitch, width, kind,
                              what);
      std::memmove(to + row * destination_pitch, from + row * source_pitch, width);
    }
  });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  const strata::emu::DeviceLock lock;
  strata::emu::enqueue_set(pointer, value, bytes, runtime().legacy, "cudaMemset");
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  strata::emu::enqueue_set(pointer, value, bytes, strata::emu::stream_of(stream, "cudaMemsetAsync"),
                           "cudaMemsetAsync");
  return cudaSuccess;
}

// ---- Streams ---------------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  const strata::emu::DeviceLock lock;
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  const strata::emu::DeviceLock lock;
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) {
    return returned(cudaErrorInvalidValue);
  }
  auto created = std::make_unique<CUstream_st>();
  created->blocking = (flags & cudaStreamNonBlocking) == 0;
  *stream = created.get();
  runtime().streams.push_back(std::move(created));
  return cudaSuccess;
}

// The stream's queued work still runs (it is kept by id), as on a GPU.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  auto& streams = runtime().streams;
  for (auto it = streams.begin(); it != streams.end(); ++it) {
    if (it->get() == stream) {
      streams.erase(it);
      return cudaSuccess;
    }
  }
  return returned(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  const CUstream_st& target = strata::emu::stream_of(stream, "cudaStreamSynchronize");
  if (strata::emu::is_pending(target.last_work)) run_until({target.last_work});
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  const CUstream_st& target = strata::emu::stream_of(stream, "cudaStreamQuery");
  return strata::emu::is_pending(target.last_work) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned /*flags*/) {
  const strata::emu::DeviceLock lock;
  const CUevent_st* waited = strata::emu::event_of(event);
  if (waited == nullptr) return returned(cudaErrorInvalidResourceHandle);
  strata::emu::enqueue_on(
      strata::emu::stream_of(stream, "cudaStreamWaitEvent"), "cudaStreamWaitEvent", [] {},
      waited->marker);
  return cudaSuccess;
}

// ---- Events ----------------------------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  const strata::emu::DeviceLock lock;
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  const strata::emu::DeviceLock lock;
  if (event == nullptr) return returned(cudaErrorInvalidValue);
  auto created = std::make_unique<CUevent_st>();
  created->timing = (flags & cudaEventDisableTiming) == 0;
  *event = created.get();
  runtime().events.push_back(std::move(created));
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  const strata::emu::DeviceLock lock;
  auto& events = runtime().events;
  for (auto it = events.begin(); it != events.end(); ++it) {
    if (it->get() == event) {
      events.erase(it);
      return cudaSuccess;
    }
  }
  return returned(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  const strata::emu::DeviceLock lock;
  CUevent_st* recorded = strata::emu::event_of(event);
  if (recorded == nullptr) return returned(cudaErrorInvalidResourceHandle);
  recorded->marker = strata::emu::enqueue_on(
      strata::emu::stream_of(stream, "cudaEventRecord"), "cudaEventRecord",
      [reached = recorded->reached] { *reached = strata::emu::Clock::now(); });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const strata::emu::DeviceLock lock;
  const CUevent_st* waited = strata::emu::event_of(event);
  if (waited == nullptr) return returned(cudaErrorInvalidResourceHandle);
  if (strata::emu::is_pending(waited->marker)) run_until({waited->marker});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const strata::emu::DeviceLock lock;
  const CUevent_st* queried = strata::emu::event_of(event);
  if (queried == nullptr) return returned(cudaErrorInvalidResourceHandle);
  return strata::emu::is_pending(queried->marker) ? cudaErrorNotReady : cudaSuccess;
}

// The host time between the two records' runs (they run when a synchronizing call needs them,
// so this measures the emulation, not a GPU), never negative.
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  const strata::emu::DeviceLock lock;
  const CUevent_st* first = strata::emu::event_of(start);
  const CUevent_st* second = strata::emu::event_of(end);
  if (milliseconds == nullptr) return returned(cudaErrorInvalidValue);
  if (first == nullptr || second == nullptr || !first->timing || !second->timing ||
      first->marker == 0 || second->marker == 0) {
    return returned(cudaErrorInvalidResourceHandle);
  }
  if (strata::emu::is_pending(first->marker) || strata::emu::is_pending(second->marker)) {
    return returned(cudaErrorNotReady);
  }
  const std::chrono::duration<float, std::milli> elapsed = *second->reached - *first->reached;
  *milliseconds = std::max(0.0f, elapsed.count());
  return cudaSuccess;
}
