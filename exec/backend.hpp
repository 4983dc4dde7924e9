#pragma once
// Backend: where a rank's tensors live and its kernels run (docs/design.md, "Executor"). The
// runtime (exec/rank_runtime.hpp) is written against this interface only: device buffers, the
// kernels of kernels/cpu/kernels.hpp with the same contracts, and streams with events. The CPU
// backend runs every call at once on the calling thread, so its streams are already in order and
// its events complete when recorded; a CUDA backend enqueues on real streams and records real
// events, and the runtime's calls (wait_event before a task whose dependency ran on another stream)
// are what make that correct.
//
// Buffers hold float32 or bfloat16 (common/bf16.hpp); token ids are int32. The kernels come in
// sets by storage type (Kernels<T>): every backend has the fp32 set (the CPU backend trains in
// fp32 only); a backend with bf16 kernels (CUDA) has the bf16 set too.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/bf16.hpp"
#include "common/error.hpp"
#include "kernels/cpu/kernels.hpp"
#include "plan/task_graph.hpp"

namespace strata {

// The DType of a storage type.
template <typename T>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, Bf16>, "float or Bf16");
  return std::is_same_v<T, float> ? DType::kFp32 : DType::kBf16;
}

// Calls f with a value of the storage type of `dtype`, float or Bf16: code templated on the
// storage type, run for a tensor's dtype.
template <typename F>
void with_storage_type(DType dtype, F&& f) {
  if (dtype == DType::kBf16) {
    f(Bf16{});
  } else {
    STRATA_ASSERT(dtype == DType::kFp32, "the executor stores fp32 and bf16 only");
    f(float{});
  }
}

// The kernels of a training step with T the storage type of activations and parameters: the
// contracts of kernels/cpu/kernels.hpp, with the mixed-precision split of kernels/cuda whatever T
// is: parameter gradients (dweight, dbias, dwte, dwpe) are fp32 and ACCUMULATE; saved statistics
// (mean, rstd), the loss's per-row values (maxes, sums, target logits, losses), the gradients the
// norm and AdamW read, AdamW's master weights and states are fp32. Arithmetic is fp32.
template <typename T>
class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t n,
                              int64_t c, int64_t oc) = 0;
  // out (N,OC) += inp @ weight^T: cpu::matmul_forward_accumulate. The second branch of a parallel
  // block adds into the first's partial sums.
  virtual void matmul_forward_accumulate(T* out, const T* inp, const T* weight, int64_t n,
                                         int64_t c, int64_t oc) = 0;
  virtual void matmul_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                               const T* weight, int64_t n, int64_t c, int64_t oc) = 0;
  virtual void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                 const T* bias, int64_t n, int64_t c) = 0;
  virtual void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout,
                                  const T* inp, const T* weight, const float* mean,
                                  const float* rstd, int64_t n, int64_t c) = 0;
  // How the executor runs the backward of a norm whose graph keeps only the norm's input (the
  // stored activations of Korthikanti et al. 2022 count only the input): mean and rstd are
  // recomputed from inp as layernorm_forward computes them, then layernorm_backward runs. The
  // result must be bit-identical to layernorm_forward then layernorm_backward with the saved
  // statistics. Arguments as layernorm_backward's, less mean and rstd.
  virtual void layernorm_backward_from_input(T* dinp, float* dweight, float* dbias, const T* dout,
                                             const T* inp, const T* weight, int64_t n,
                                             int64_t c) = 0;
  // RMSNorm: cpu::rmsnorm_forward in kernels/cpu/kernels.hpp.
  virtual void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t n,
                               int64_t c) = 0;
  // cpu::rmsnorm_backward in kernels/cpu/kernels.hpp.
  virtual void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp,
                                const T* weight, const float* rstd, int64_t n, int64_t c) = 0;
  // The same for RMSNorm, for a graph that keeps only the norm's input (Korthikanti et al. 2022):
  // rstd is recomputed from inp as rmsnorm_forward computes it, then rmsnorm_backward runs; the
  // result must be bit-identical to rmsnorm_forward then rmsnorm_backward with the saved rstd.
  virtual void rmsnorm_backward_from_input(T* dinp, float* dweight, const T* dout, const T* inp,
                                           const T* weight, int64_t n, int64_t c) = 0;
  virtual void gelu_forward(T* out, const T* inp, int64_t n) = 0;
  virtual void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) = 0;
  // SwiGLU, inp (N,2H) = [gate | up]: cpu::swiglu_forward in kernels/cpu/kernels.hpp.
  virtual void swiglu_forward(T* out, const T* inp, int64_t n, int64_t h) = 0;
  // cpu::swiglu_backward in kernels/cpu/kernels.hpp.
  virtual void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) = 0;
  // GeGLU, inp (N,2H) = [gate | up]: cpu::geglu_forward and geglu_backward.
  virtual void geglu_forward(T* out, const T* inp, int64_t n, int64_t h) = 0;
  virtual void geglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) = 0;
  virtual void attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                                 int64_t hs) = 0;
  virtual void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                                  int64_t t, int64_t nh, int64_t hs) = 0;
  // Grouped-query attention, NKV kv heads, each query attending to at most `window` keys (0: the
  // whole causal prefix), the probabilities dropped by keep (B,NH,T,T) and scaled by
  // dropout_scale (keep null: no dropout; dropped, when not null, receives the dropped
  // probabilities): cpu::gqa_attention_forward in kernels/cpu/kernels.hpp.
  virtual void gqa_attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                                     int64_t nkv, int64_t hs, int64_t window, const T* keep,
                                     float dropout_scale, T* dropped) = 0;
  // cpu::gqa_attention_backward in kernels/cpu/kernels.hpp, with the forward's keep and
  // dropout_scale.
  virtual void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                                      int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                                      int64_t window, const T* keep, float dropout_scale) = 0;
  // Rotary position embedding (rotate-half): cpu::rotary_forward in kernels/cpu/kernels.hpp.
  virtual void rotary_forward(T* out, const T* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
                              int64_t row_stride, int64_t first_col, double theta) = 0;
  // cpu::rotary_backward in kernels/cpu/kernels.hpp.
  virtual void rotary_backward(T* dinp, const T* dout, int64_t b, int64_t t, int64_t heads,
                               int64_t hs, int64_t row_stride, int64_t first_col, double theta) = 0;
  // out = residual + (branch + bias) * mask * dropout_scale (mask null: residual + branch + bias):
  // cpu::residual_forward in kernels/cpu/kernels.hpp.
  virtual void residual_forward(T* out, const T* residual, const T* branch, const T* bias,
                                int64_t n, int64_t c, const T* mask, float dropout_scale) = 0;
  virtual void residual_backward(float* dbias, const T* dout, int64_t n, int64_t c) = 0;
  // Dropout's counter-based mask (N,C), and a tensor through a mask: cpu::dropout_mask and
  // cpu::apply_dropout in kernels/cpu/kernels.hpp.
  virtual void dropout_mask(T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n,
                            int64_t c, double rate) = 0;
  virtual void apply_dropout(T* out, const T* in, const T* mask, float dropout_scale,
                             int64_t n) = 0;
  // dst (n) += src (n): a residual stream's gradient picking up a branch's.
  virtual void accumulate(T* dst, const T* src, int64_t n) = 0;
  virtual void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                 int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                                 int64_t c) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                                  int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                                  int64_t c) = 0;
  virtual void row_max(float* maxes, const T* logits, int64_t n, int64_t v) = 0;
  virtual void cross_entropy_partials(float* sums, float* targets_logit, const T* logits,
                                      const float* maxes, const int32_t* targets,
                                      int64_t vocab_start, int64_t n, int64_t v) = 0;
  virtual void cross_entropy_losses(float* losses, const float* sums, const float* maxes,
                                    const float* targets_logit, int64_t n) = 0;
  virtual void cross_entropy_backward(T* dlogits, const T* logits, const float* maxes,
                                      const float* sums, const int32_t* targets,
                                      int64_t vocab_start, float scale, int64_t n, int64_t v) = 0;
  // *total += the sum of x[i]^2 (n), in fp64: one tensor's part of the squared global gradient
  // norm. total is one double in the backend's memory, where the norm stays for AdamW.
  virtual void sum_of_squares(double* total, const float* x, int64_t n) = 0;
  // AdamW (cpu::adamw_update) on the fp32 master weights (n), the gradient scaled by
  // cpu::clip_factor(sqrt(*norm_squared), max_norm), the squared global norm read in the
  // backend's memory (on a device: no host round trip); param (n) then holds the updated masters
  // rounded to T. master null: param is its own master (fp32 training; T is float).
  virtual void adamw_update(T* param, float* master, const float* grad, float* m, float* v,
                            int64_t n, const cpu::AdamWConfig& config, int64_t step,
                            const double* norm_squared, double max_norm) = 0;
};

// An event that the backends of other thread-ranks on the same device can wait for (the loopback
// communicator's: a collective's input is ready, a rank's reads of its peers' buffers are done).
// Destroyed with its last holder, which may be before it completes: the waits queued on it stand.
class SharedEvent {
 public:
  virtual ~SharedEvent() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // The kernel sets: fp32 always; bf16 where the backend has bf16 kernels (null elsewhere).
  virtual Kernels<float>& fp32() = 0;
  virtual Kernels<Bf16>* bf16() { return nullptr; }
  // The set of storage type T; the caller has checked that the backend has it.
  template <typename T>
  Kernels<T>& kernels() {
    if constexpr (std::is_same_v<T, float>) {
      return fp32();
    } else {
      Kernels<Bf16>* set = bf16();
      STRATA_ASSERT(set != nullptr, "the backend has bf16 kernels");
      return *set;
    }
  }

  // Memory, in bytes. allocate() returns device memory zero-filled in the order of the current
  // stream: a task on another stream sees the zeros once it waits for the allocating task's
  // event, or after synchronize().
  virtual void* allocate_bytes(int64_t bytes) = 0;
  // Frees after the work queued so far on every stream of this backend. Memory may come from
  // another backend of the same device (a loopback message, freed by its receiver).
  virtual void release(void* data) = 0;
  virtual void fill_zero_bytes(void* data, int64_t bytes) = 0;
  virtual void copy_bytes(void* dst, const void* src, int64_t bytes) = 0;
  // `rows` rows of `row_bytes` from src, rows `src_pitch` bytes apart, to dst, rows `dst_pitch`
  // apart (cudaMemcpy2D's contract): a column block of a row-major tensor.
  virtual void copy_2d_bytes(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                             int64_t rows, int64_t row_bytes) = 0;
  // Host to device and back; each completes before it returns (the host memory may be reused).
  virtual void upload_bytes(void* dst, const void* host, int64_t bytes) = 0;
  virtual void download_bytes(void* host, const void* src, int64_t bytes) = 0;
  // dst (n elements of dst_dtype) = src (n of src_dtype), on the current stream: a copy where the
  // dtypes agree, else fp32 to bf16 rounded to nearest even or bf16 to fp32 exactly (where a bf16
  // graph meets its fp32 tensors: the logits, gradients reduced in bf16).
  virtual void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) = 0;

  // out (n) = the reduction of the inputs (n each; buffers of any backend on this device), on the
  // current stream: ((in[0] op in[1]) op in[2]) op ..., each step in the element's own
  // arithmetic and rounded to it (reduce_step of exec/communicator.hpp): the communicators'
  // group-order reduction, on device memory (the loopback communicator's). out overlaps no input.
  virtual void reduce_in_order(float* out, std::span<const float* const> inputs, int64_t n,
                               ReduceOp op) = 0;
  virtual void reduce_in_order(double* out, std::span<const double* const> inputs, int64_t n,
                               ReduceOp op) = 0;
  virtual void reduce_in_order(Bf16* out, std::span<const Bf16* const> inputs, int64_t n,
                               ReduceOp op) = 0;

  // The same in elements of T.
  template <typename T>
  T* allocate(int64_t elements) {
    return static_cast<T*>(allocate_bytes(elements * int64_t{sizeof(T)}));
  }
  template <typename T>
  void fill_zero(T* data, int64_t n) {
    fill_zero_bytes(data, n * int64_t{sizeof(T)});
  }
  template <typename T>
  void copy(T* dst, const T* src, int64_t n) {
    copy_bytes(dst, src, n * int64_t{sizeof(T)});
  }
  template <typename T>
  void copy_2d(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t rows,
               int64_t cols) {
    constexpr auto size = int64_t{sizeof(T)};
    copy_2d_bytes(dst, dst_stride * size, src, src_stride * size, rows, cols * size);
  }
  template <typename T>
  void upload(T* dst, std::type_identity_t<std::span<const T>> host) {
    upload_bytes(dst, host.data(), static_cast<int64_t>(host.size_bytes()));
  }
  template <typename T>
  void download(std::span<T> host, const T* src) {
    download_bytes(host.data(), src, static_cast<int64_t>(host.size_bytes()));
  }

  // Streams and events: kernels and copies go to the current stream.
  virtual void set_stream(Stream stream) = 0;
  // An event recorded on `stream` after the work queued so far; wait_event makes `stream` wait
  // for it. Ids are the runtime's (one per task).
  virtual void record_event(Stream stream, int64_t event) = 0;
  virtual void wait_event(Stream stream, int64_t event) = 0;
  // An event recorded on the current stream after the work queued so far, for other backends on
  // the same device; wait_shared_event makes the current stream wait for one (from any of them).
  virtual std::shared_ptr<const SharedEvent> record_shared_event() = 0;
  virtual void wait_shared_event(const SharedEvent& event) = 0;
  // Blocks the host until every stream is idle.
  virtual void synchronize() = 0;
  // The current stream's handle in the device's own API (a cudaStream_t on CUDA), for a
  // communicator that queues its collectives on the task's stream (NCCL); null on the CPU.
  virtual void* native_stream() { return nullptr; }

  // Timing of a step's tasks where they run. mark() takes a timestamp on `stream` once the work
  // queued there so far is done (the host clock where every call has finished when it returns,
  // a timing event on a device) and returns its index, counted from 0 after clear_marks();
  // after synchronize(), mark_ns(i) is mark i's time in ns after mark 0.
  virtual void clear_marks() = 0;
  virtual int64_t mark(Stream stream) = 0;
  virtual int64_t mark_ns(int64_t index) = 0;
};

// The CPU backend: host memory, kernels/cpu, OpenBLAS with one thread per rank.
std::unique_ptr<Backend> make_cpu_backend();

// A device buffer of fp32 or bf16 elements that releases itself: the runtime's tensors.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(Backend& backend, int64_t elements, DType dtype)
      : backend_(&backend),
        data_(backend.allocate_bytes(elements * bytes_per_element(dtype))),
        size_(elements),
        dtype_(dtype) {}
  DeviceTensor(DeviceTensor&& other) noexcept { *this = std::move(other); }
  DeviceTensor& operator=(DeviceTensor&& other) noexcept {
    reset();
    backend_ = other.backend_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    dtype_ = other.dtype_;
    return *this;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { reset(); }

  void reset() {
    if (data_ != nullptr) backend_->release(data_);
    data_ = nullptr;
    size_ = 0;
  }
  // The elements, as T: the tensor's own storage type.
  template <typename T>
  T* data() const {
    STRATA_ASSERT(data_ == nullptr || dtype_ == dtype_of<T>(),
                  "a tensor is read as its own storage type");
    return static_cast<T*>(data_);
  }
  // The address of element `index`, whatever the storage type (staging buffers that move
  // several tensors, of the dtype a plan chose).
  void* address(int64_t index = 0) const {
    return static_cast<std::byte*>(data_) + index * bytes_per_element(dtype_);
  }
  int64_t size() const { return size_; }
  DType dtype() const { return dtype_; }
  bool allocated() const { return data_ != nullptr; }

 private:
  Backend* backend_ = nullptr;
  void* data_ = nullptr;
  int64_t size_ = 0;
  DType dtype_ = DType::kFp32;
};

// Host values into the first values.size() elements of a tensor of either storage dtype
// (rounded to it), and a tensor's elements back as floats (exactly).
void upload_values(Backend& backend, const DeviceTensor& tensor, std::span<const float> values);
std::vector<float> download_values(Backend& backend, const DeviceTensor& tensor);

// Backend::convert on host memory (the CPU backend's, and the host side of the two above).
void convert_on_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

// One double in a backend's memory, released with the object.
class DeviceScalar {
 public:
  explicit DeviceScalar(Backend& backend)
      : backend_(&backend), data_(backend.allocate<double>(1)) {}
  DeviceScalar(const DeviceScalar&) = delete;
  DeviceScalar& operator=(const DeviceScalar&) = delete;
  ~DeviceScalar() { backend_->release(data_); }
  double* data() const { return data_; }

 private:
  Backend* backend_;
  double* data_;
};

// Token ids on the device, released with the object.
class DeviceTokens {
 public:
  DeviceTokens(Backend& backend, std::span<const int32_t> host)
      : backend_(&backend), data_(backend.allocate<int32_t>(static_cast<int64_t>(host.size()))) {
    backend.upload(data_, host);
  }
  DeviceTokens(DeviceTokens&& other) noexcept
      : backend_(other.backend_), data_(std::exchange(other.data_, nullptr)) {}
  DeviceTokens& operator=(DeviceTokens&&) = delete;
  DeviceTokens(const DeviceTokens&) = delete;
  DeviceTokens& operator=(const DeviceTokens&) = delete;
  ~DeviceTokens() {
    if (data_ != nullptr) backend_->release(data_);
  }
  const int32_t* data() const { return data_; }

 private:
  Backend* backend_;
  int32_t* data_;
};

}  // namespace strata
