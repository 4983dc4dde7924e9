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
// An item with a wait condition (strata_emu_waits.hpp) runs only once the condition holds; until
// then the thread runs other ready work, and fails when nothing anywhere has run for the wait
// timeout.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
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
#include "strata_emu_waits.hpp"

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
  WaitCondition waits;  // null: runs once `after` ran
};

struct Runtime {
  std::map<uint64_t, Work> pending;  // by id, which is the enqueue order
  std::set<uint64_t> running;        // taken from pending, not yet returned
  uint64_t releases = 0;             // times a thread released the device lock (Unlocked)
  uint64_t finished = 0;             // items that ran to the end, on any thread
  std::chrono::milliseconds wait_timeout{60'000};
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
                    const std::vector<uint64_t>& also_after = {}, WaitCondition waits = nullptr) {
  Runtime& r = runtime();
  Work work{std::move(what), std::move(run), {}, false, std::move(waits)};
  if (is_pending(stream.last_work)) work.after.push_back(stream.last_work);
  for (const uint64_t id : also_after) {
    if (is_pending(id)) work.after.push_back(id);
  }
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

// Which of the ready items runs next, in the options' order among those whose wait condition
// holds; 0 when none can run yet.
uint64_t pick_runnable(const std::set<uint64_t>& ready) {
  const Runtime& r = runtime();
  std::vector<uint64_t> runnable;
  runnable.reserve(ready.size());
  for (const uint64_t id : ready) {
    const WaitCondition& waits = r.pending.at(id).waits;
    if (!waits || waits().empty()) runnable.push_back(id);
  }
  return runnable.empty() ? 0 : runnable[pick_next(runnable.size())];
}

// Runs queued item id on this thread. A failure drops the rest of the queued work, as a fault
// leaves a GPU's context unusable, and propagates.
void run_item(uint64_t id) {
  Runtime& r = runtime();
  Work work = std::move(r.pending.at(id));
  r.pending.erase(id);
  r.running.insert(id);
  try {
    work.run();
  } catch (...) {
    r.running.erase(id);
    r.pending.clear();
    throw;
  }
  r.running.erase(id);
  ++r.finished;
}

// Runs the queued items that can run (their dependencies ran, their wait conditions hold),
// whichever thread queued them, until none can; false when none could. A scan of every queued
// item: skipped while nothing was queued or finished since the last one that found none.
bool run_unneeded() {
  Runtime& r = runtime();
  static thread_local std::pair<uint64_t, uint64_t> found_none = {0, 0};  // (finished, next_id)
  if (found_none == std::pair{r.finished, r.next_id}) return false;
  bool ran = false;
  while (true) {
    std::set<uint64_t> ready;
    for (const auto& [id, work] : r.pending) {
      if (std::ranges::none_of(work.after, is_pending)) ready.insert(id);
    }
    const uint64_t next = pick_runnable(ready);
    if (next == 0) break;
    run_item(next);
    ran = true;
  }
  found_none = {r.finished, r.next_id};
  return ran;
}

// Called when no work ran anywhere for the wait timeout: fails naming every item that waits for
// its condition alone (its dependencies ran), on any thread, if there is one (else the thread
// waits for long work on other threads), dropping the queued work.
void fail_if_waiting() {
  Runtime& r = runtime();
  std::string waiting;
  for (const auto& [id, work] : r.pending) {
    if (!work.waits || std::ranges::any_of(work.after, is_pending)) continue;
    const std::string reason = work.waits();
    if (reason.empty()) continue;
    if (!waiting.empty()) waiting += "; ";
    waiting +=
        work.what + ": " + reason + " within " + std::to_string(r.wait_timeout.count()) + " ms";
  }
  if (waiting.empty()) return;
  r.pending.clear();
  // A destructor synchronizing while its stack unwinds from a failure (another rank's, say, whose
  // work these items wait for): the queued work is dropped and the call returns, as calls on a
  // faulted GPU context return at once; throwing would end the process.
  if (std::uncaught_exceptions() > 0) return;
  fail(waiting +
       " (no queued work ran anywhere meanwhile); every rank must synchronize its streams before "
       "it blocks on the host (kernels/emu/include/nccl.h)");
}

// Waits, with the device lock released, until what a synchronizing call needs may have moved on:
// one of its ready items ran elsewhere or its wait condition now holds, or one of its items that
// ran on another thread (`elsewhere`) finished. Once no item has finished anywhere for a
// millisecond, runs whatever queued work can run, whichever thread queued it (a GPU runs every
// stream: another rank's thread may be waiting too, for this one's work); fails when nothing
// has finished for the wait timeout while items wait for their conditions. True when only a
// wait condition changed: the caller's ready items and counts still hold; false when they must
// be gathered again.
bool wait_for_change(const std::set<uint64_t>& ready, const std::vector<uint64_t>& elsewhere) {
  Runtime& r = runtime();
  uint64_t finished_seen = r.finished;
  Clock::time_point progress = Clock::now();
  while (true) {
    {
      const Unlocked unlocked;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (std::ranges::any_of(ready, [&](const uint64_t id) { return r.pending.count(id) == 0; }) ||
        std::ranges::any_of(elsewhere, [](const uint64_t id) { return !is_pending(id); })) {
      return false;
    }
    if (pick_runnable(ready) != 0) return true;
    const Clock::time_point now = Clock::now();
    if (r.finished != finished_seen) {
      finished_seen = r.finished;
      progress = now;
    } else if (now - progress > std::chrono::milliseconds(1) && run_unneeded()) {
      return false;
    } else if (now - progress > r.wait_timeout) {
      fail_if_waiting();
      progress = now;  // nothing waits for a condition: long work runs on another thread
    }
  }
}

// Runs targets and everything they wait for (every incomplete item when targets is empty), one
// ready item at a time in the options' order, until none of them is incomplete; items running on
// other threads (released by Unlocked) and items whose wait condition does not hold yet are
// waited for, with the device lock released, while other threads' queued work runs here.
//
// The items needed and their dependencies are gathered once (Kahn's algorithm over them), and
// again when other threads may have run some of them (an item released the device lock, or
// work ran elsewhere while this thread waited): the queues of a training step hold thousands of
// items.
void run_until(const std::vector<uint64_t>& targets) {
  const DeviceLock lock;
  Runtime& r = runtime();
  std::vector<uint64_t> goals(targets);
  if (goals.empty()) {
    for (const auto& [id, work] : r.pending) goals.push_back(id);
    goals.insert(goals.end(), r.running.begin(), r.running.end());
  }
  while (true) {
    uint64_t releases = r.releases;
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
    std::set<uint64_t> ready;         // oldest first
    std::vector<uint64_t> elsewhere;  // running on other threads
    for (const uint64_t id : needed) {
      const auto queued = r.pending.find(id);
      if (queued == r.pending.end()) {
        elsewhere.push_back(id);
        continue;
      }
      int count = 0;
      for (const uint64_t before : queued->second.after) {
        if (!is_pending(before)) continue;
        ++count;
        dependents[before].push_back(id);
      }
      waiting_on[id] = count;
      if (count == 0) ready.insert(id);
    }
    while (r.releases == releases) {
      const uint64_t next = pick_runnable(ready);
      if (next == 0) {
        // Everything needed ran, or what is left waits for items running on other threads, or
        // for other threads' work that a wait condition names.
        if (ready.empty() && elsewhere.empty()) break;
        if (!wait_for_change(ready, elsewhere)) break;
        releases = r.releases;
        continue;
      }
      ready.erase(next);
      run_item(next);
      for (const uint64_t waiter : dependents[next]) {
        if (--waiting_on[waiter] == 0) ready.insert(waiter);
      }
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

uint64_t enqueue_waiting(cudaStream_t stream, std::string what, WaitCondition waits,
                         std::function<void()> work, const std::vector<uint64_t>& after) {
  const DeviceLock lock;
  CUstream_st& target = stream_of(stream, what);
  return enqueue_on(target, std::move(what), std::move(work), after, std::move(waits));
}

uint64_t last_queued(cudaStream_t stream) {
  const DeviceLock lock;
  const uint64_t last = stream_of(stream, "last_queued").last_work;
  return is_pending(last) ? last : 0;
}

std::chrono::milliseconds set_wait_timeout(std::chrono::milliseconds timeout) {
  const DeviceLock lock;
  return std::exchange(runtime().wait_timeout, timeout);
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
  strata::emu::enqueue_on(strata::emu::stream_of(stream, "cudaStreamWaitEvent"),
                          "cudaStreamWaitEvent", [] {}, {waited->marker});
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
