#pragma once
// Backend: where a rank's tensors live and its kernels run (docs/design.md, "Executor"). The
// runtime (exec/rank_runtime.hpp) is written against this interface only: device buffers, the
// kernels of kernels/cpu/kernels.hpp with the same contracts, and streams with events. The CPU
// backend runs every call at once on the calling thread, so its streams are already in order and
// its events complete when recorded; a CUDA backend enqueues on real streams and records real
// events, and the runtime's calls (wait_event before a task whose dependency ran on another stream)
// are what make that correct.
//
// Buffers hold float32 (the CPU backend trains in fp32); token ids are int32.

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "kernels/cpu/kernels.hpp"
#include "plan/task_graph.hpp"

namespace strata {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Memory. allocate() returns device memory zero-filled in the order of the current stream: a
  // task on another stream sees the zeros once it waits for the allocating task's event, or
  // after synchronize().
  virtual float* allocate(int64_t elements) = 0;
  virtual int32_t* allocate_tokens(int64_t elements) = 0;
  virtual void release(void* data) = 0;
  virtual void fill_zero(float* data, int64_t n) = 0;
  virtual void copy(float* dst, const float* src, int64_t n) = 0;
  // `rows` rows of `cols` elements from src, rows `src_stride` elements apart, to dst, rows
  // `dst_stride` apart (cudaMemcpy2D's contract): a column block of a row-major tensor.
  virtual void copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                       int64_t rows, int64_t cols) = 0;
  virtual void upload(float* dst, std::span<const float> host) = 0;
  virtual void upload_tokens(int32_t* dst, std::span<const int32_t> host) = 0;
  virtual void download(std::span<float> host, const float* src) = 0;

  // Streams and events: kernels and copies go to the current stream.
  virtual void set_stream(Stream stream) = 0;
  // An event recorded on `stream` after the work queued so far; wait_event makes `stream` wait
  // for it. Ids are the runtime's (one per task).
  virtual void record_event(Stream stream, int64_t event) = 0;
  virtual void wait_event(Stream stream, int64_t event) = 0;
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

  // Kernels: the contracts of kernels/cpu/kernels.hpp.
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                              int64_t n, int64_t c, int64_t oc) = 0;
  // out (N,OC) += inp @ weight^T: cpu::matmul_forward_accumulate. The second branch of a parallel
  // block adds into the first's partial sums.
  virtual void matmul_forward_accumulate(float* out, const float* inp, const float* weight,
                                         int64_t n, int64_t c, int64_t oc) = 0;
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, int64_t n, int64_t c,
                               int64_t oc) = 0;
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int64_t n, int64_t c) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int64_t n, int64_t c) = 0;
  // How the executor runs the backward of a norm whose graph keeps only the norm's input (the
  // stored activations of Korthikanti et al. 2022 count only the input): mean and rstd are
  // recomputed from inp as layernorm_forward computes them, then layernorm_backward runs. The
  // result must be bit-identical to layernorm_forward then layernorm_backward with the saved
  // statistics. Arguments as layernorm_backward's, less mean and rstd.
  virtual void layernorm_backward_from_input(float* dinp, float* dweight, float* dbias,
                                             const float* dout, const float* inp,
                                             const float* weight, int64_t n, int64_t c) = 0;
  // RMSNorm: cpu::rmsnorm_forward in kernels/cpu/kernels.hpp.
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                               int64_t n, int64_t c) = 0;
  // cpu::rmsnorm_backward in kernels/cpu/kernels.hpp.
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, int64_t n, int64_t c) = 0;
  // The same for RMSNorm, for a graph that keeps only the norm's input (Korthikanti et al. 2022):
  // rstd is recomputed from inp as rmsnorm_forward computes it, then rmsnorm_backward runs; the
  // result must be bit-identical to rmsnorm_forward then rmsnorm_backward with the saved rstd.
  virtual void rmsnorm_backward_from_input(float* dinp, float* dweight, const float* dout,
                                           const float* inp, const float* weight, int64_t n,
                                           int64_t c) = 0;
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;
  // SwiGLU, inp (N,2H) = [gate | up]: cpu::swiglu_forward in kernels/cpu/kernels.hpp.
  virtual void swiglu_forward(float* out, const float* inp, int64_t n, int64_t h) = 0;
  // cpu::swiglu_backward in kernels/cpu/kernels.hpp.
  virtual void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                               int64_t h) = 0;
  // GeGLU, inp (N,2H) = [gate | up]: cpu::geglu_forward and geglu_backward.
  virtual void geglu_forward(float* out, const float* inp, int64_t n, int64_t h) = 0;
  virtual void geglu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                              int64_t h) = 0;
  virtual void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t,
                                 int64_t nh, int64_t hs) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, int64_t b, int64_t t, int64_t nh,
                                  int64_t hs) = 0;
  // Grouped-query attention, NKV kv heads, each query attending to at most `window` keys (0: the
  // whole causal prefix), the probabilities dropped by keep (B,NH,T,T) and scaled by
  // dropout_scale (keep null: no dropout; dropped, when not null, receives the dropped
  // probabilities): cpu::gqa_attention_forward in kernels/cpu/kernels.hpp.
  virtual void gqa_attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t,
                                     int64_t nh, int64_t nkv, int64_t hs, int64_t window,
                                     const float* keep, float dropout_scale, float* dropped) = 0;
  // cpu::gqa_attention_backward in kernels/cpu/kernels.hpp, with the forward's keep and
  // dropout_scale.
  virtual void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv,
                                      const float* att, int64_t b, int64_t t, int64_t nh,
                                      int64_t nkv, int64_t hs, int64_t window, const float* keep,
                                      float dropout_scale) = 0;
  // Rotary position embedding (rotate-half): cpu::rotary_forward in kernels/cpu/kernels.hpp.
  virtual void rotary_forward(float* out, const float* inp, int64_t b, int64_t t, int64_t heads,
                              int64_t hs, int64_t row_stride, int64_t first_col, double theta) = 0;
  // cpu::rotary_backward in kernels/cpu/kernels.hpp.
  virtual void rotary_backward(float* dinp, const float* dout, int64_t b, int64_t t, int64_t heads,
                               int64_t hs, int64_t row_stride, int64_t first_col, double theta) = 0;
  // out = residual + (branch + bias) * mask * dropout_scale (mask null: residual + branch + bias):
  // cpu::residual_forward in kernels/cpu/kernels.hpp.
  virtual void residual_forward(float* out, const float* residual, const float* branch,
                                const float* bias, int64_t n, int64_t c, const float* mask,
                                float dropout_scale) = 0;
  virtual void residual_backward(float* dbias, const float* dout, int64_t n, int64_t c) = 0;
  // Dropout's counter-based mask (N,C), and a tensor through a mask: cpu::dropout_mask and
  // cpu::apply_dropout in kernels/cpu/kernels.hpp.
  virtual void dropout_mask(float* mask, uint64_t stream, const uint64_t* row_keys, int64_t n,
                            int64_t c, double rate) = 0;
  virtual void apply_dropout(float* out, const float* in, const float* mask, float dropout_scale,
                             int64_t n) = 0;
  // dst (n) += src (n): a residual stream's gradient picking up a branch's.
  virtual void accumulate(float* dst, const float* src, int64_t n) = 0;
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int64_t vocab_start, int64_t v, int64_t b,
                                 int64_t t, int64_t c) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int64_t vocab_start, int64_t v, int64_t b,
                                  int64_t t, int64_t c) = 0;
  virtual void row_max(float* maxes, const float* logits, int64_t n, int64_t v) = 0;
  virtual void cross_entropy_partials(float* sums, float* targets_logit, const float* logits,
                                      const float* maxes, const int32_t* targets,
                                      int64_t vocab_start, int64_t n, int64_t v) = 0;
  virtual void cross_entropy_losses(float* losses, const float* sums, const float* maxes,
                                    const float* targets_logit, int64_t n) = 0;
  virtual void cross_entropy_backward(float* dlogits, const float* logits, const float* maxes,
                                      const float* sums, const int32_t* targets,
                                      int64_t vocab_start, float scale, int64_t n, int64_t v) = 0;
  virtual double sum_of_squares(const float* x, int64_t n) = 0;
  virtual void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                            const cpu::AdamWConfig& config, int64_t step, double grad_scale) = 0;
};

// The CPU backend: host memory, kernels/cpu, OpenBLAS with one thread per rank.
std::unique_ptr<Backend> make_cpu_backend();

// A device buffer that releases itself: the runtime's tensors.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(Backend& backend, int64_t elements)
      : backend_(&backend), data_(backend.allocate(elements)), size_(elements) {}
  DeviceTensor(DeviceTensor&& other) noexcept { *this = std::move(other); }
  DeviceTensor& operator=(DeviceTensor&& other) noexcept {
    reset();
    backend_ = other.backend_;
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
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
  float* data() const { return data_; }
  int64_t size() const { return size_; }
  bool allocated() const { return data_ != nullptr; }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  int64_t size_ = 0;
};

// Token ids on the device, released with the object.
class DeviceTokens {
 public:
  DeviceTokens(Backend& backend, std::span<const int32_t> host)
      : backend_(&backend), data_(backend.allocate_tokens(static_cast<int64_t>(host.size()))) {
    backend.upload_tokens(data_, host);
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
