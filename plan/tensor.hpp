#pragma once
// The tensors of the task graph (docs/design.md, "The task graph"): each a buffer one rank owns,
// with a per-rank shape and a dtype, that tasks read and write.
//
// A tensor lives either for the whole step (parameters, gradients, optimizer states, and buffers
// the step reuses) or from the memory task that allocates it to the one that frees it (a layer's
// stored activations, a pipeline message, gathered parameters); a tensor may be allocated again
// after it was freed (a layer's parameters gathered once per pass). Memory tasks name the tensors
// they allocate or free, and their bytes are the tensors' bytes, so memory over time follows from
// the tensors by construction. Buffers that no memory task allocates (scratch a pass reuses) are
// not in the memory timeline, as a framework's transient tensors are not.
//
// Each task names the tensors it uses and how (TensorUse): reads, writes (=), updates (read and
// write: += into a gradient, an in-place op), and for memory tasks allocations and frees. Compute
// tasks list their uses in the order their op kind defines (models/ops.hpp), which is what the
// executor runs them on.

#include <array>
#include <cstdint>
#include <string>

#include "models/ops.hpp"

namespace strata {

using TensorId = int32_t;
inline constexpr TensorId kNoTensor = -1;

// What a tensor is for.
enum class TensorKind : uint8_t {
  kActivation,      // a forward output kept or passed on, or its gradient
  kParameter,       // a parameter (or its shard, or its gathered copy)
  kGradient,        // a parameter's gradient (or its shard)
  kOptimizerState,  // Adam's moments and the fp32 master copy of a parameter shard
  kCommBuffer,      // a message or bucket that communication reads or writes
  kScratch,         // a buffer an op or a pass reuses
};
inline constexpr int kTensorKindCount = 6;

// A tensor's per-rank shape and dtype, interned per graph. Unused trailing dims are 1.
struct TensorShape {
  std::array<int64_t, 4> dims{1, 1, 1, 1};
  DType dtype = DType::kBf16;

  int64_t elements() const { return dims[0] * dims[1] * dims[2] * dims[3]; }
  int64_t bytes() const { return elements() * bytes_per_element(dtype); }
  auto operator<=>(const TensorShape&) const = default;
};

struct Tensor {
  int32_t rank = 0;
  int32_t shape = 0;         // into TaskGraph::shapes()
  int32_t layer = -1;        // the global transformer layer it belongs to, -1 for none
  int32_t micro_batch = -1;  // the micro-batch it belongs to, -1 for none
  int16_t index = -1;        // a parameter's index in its block, a chunk, a bucket, or -1
  TensorKind kind = TensorKind::kActivation;
  uint8_t name = 0;  // into tensor_names(): what the tensor is ("qkv", "attn_ctx", "wte", ...)
};

// How a task uses a tensor.
enum class Access : uint8_t {
  kRead,
  kWrite,   // overwrites it (=)
  kUpdate,  // reads and writes it: += into a gradient, an op in place
  kAlloc,   // a memory task allocates it
  kFree,    // a memory task frees it
};

// One use of a tensor by a task, packed in 32 bits like the dependency lists.
class TensorUse {
 public:
  TensorUse() = default;  // unset, as an int is: TensorUse{} reads tensor 0
  TensorUse(TensorId tensor, Access access)
      : packed_((static_cast<uint32_t>(tensor) << 3) | static_cast<uint32_t>(access)) {}
  TensorId tensor() const { return static_cast<TensorId>(packed_ >> 3); }
  Access access() const { return static_cast<Access>(packed_ & 7u); }
  bool reads() const { return access() == Access::kRead || access() == Access::kUpdate; }
  bool writes() const { return access() == Access::kWrite || access() == Access::kUpdate; }

 private:
  uint32_t packed_;
};
inline constexpr TensorId kMaxTensors = TensorId{1} << 28;

inline TensorUse read(TensorId tensor) { return {tensor, Access::kRead}; }
inline TensorUse write(TensorId tensor) { return {tensor, Access::kWrite}; }
inline TensorUse update(TensorId tensor) { return {tensor, Access::kUpdate}; }

const char* to_string(TensorKind kind);
const char* to_string(Access access);

}  // namespace strata
