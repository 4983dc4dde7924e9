// The CUDA backend: the graph's streams as non-blocking CUDA streams, an event per task, and the
// kernels of kernels/cuda, fp32 and bf16, behind the contracts of exec/backend.hpp.

#include "exec/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata {

namespace {

size_t bytes_of(int64_t bytes) { return static_cast<size_t>(std::max<int64_t>(bytes, 1)); }

// The kernels' element type of a storage type: Bf16 is __nv_bfloat16's layout (common/bf16.hpp).
template <typename T>
using DeviceType = std::conditional_t<std::is_same_v<T, Bf16>, cuda::bf16, T>;
template <typename T>
auto* dev(T* data) {
  using Device = DeviceType<std::remove_const_t<T>>;
  if constexpr (std::is_const_v<T>) {
    return reinterpret_cast<const Device*>(data);
  } else {
    return reinterpret_cast<Device*>(data);
  }
}

// A CUDA event for the backends of other thread-ranks on the device (Backend::SharedEvent).
// cudaEventDestroy on a recorded event that has not completed is allowed: its resources go once
// it completes, and waits already queued on it stand (CUDA runtime API, cudaEventDestroy).
class CudaSharedEvent final : public SharedEvent {
 public:
  explicit CudaSharedEvent(cudaStream_t stream) {
    STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  CudaSharedEvent(const CudaSharedEvent&) = delete;
  CudaSharedEvent& operator=(const CudaSharedEvent&) = delete;
  ~CudaSharedEvent() override { cudaEventDestroy(event_); }
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A rank's device state, shared by its kernel sets: the device, the current stream, and per
// stream its handle, the kernels' context and the backend's scratch.
class CudaDevice {
 public:
  explicit CudaDevice(int device) : device_(device) {
    const int devices = cuda_device_count();
    if (device < 0 || device >= devices) {
      throw std::runtime_error(fmt::format(
          "the cuda backend needs CUDA device {}, and this machine has {}", device, devices));
    }
    STRATA_CUDA_CHECK(cudaSetDevice(device_));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&free_stream_, cudaStreamNonBlocking));
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  ~CudaDevice() {
    cudaSetDevice(device_);
    for (cudaStream_t stream : streams_) {
      if (stream != nullptr) cudaStreamSynchronize(stream);
    }
    cudaStreamSynchronize(free_stream_);
    contexts_ = {};
    for (Scratch& s : scratch_) {
      if (s.data != nullptr) cudaFree(s.data);
    }
    for (auto& [id, event] : events_) cudaEventDestroy(event);
    for (cudaEvent_t event : marks_) cudaEventDestroy(event);
    for (cudaEvent_t event : release_events_) {
      if (event != nullptr) cudaEventDestroy(event);
    }
    for (cudaStream_t stream : streams_) {
      if (stream != nullptr) cudaStreamDestroy(stream);
    }
    cudaStreamDestroy(free_stream_);
  }

  cudaStream_t stream_of(Stream stream) {
    cudaStream_t& handle = streams_.at(static_cast<size_t>(stream));
    if (handle == nullptr) {
      STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
    }
    return handle;
  }
  cudaStream_t stream() { return stream_of(static_cast<Stream>(current_)); }

  // The kernels' context of the current stream: cuBLAS handles and scratch are per stream, made
  // on a stream's first kernel (copies need none).
  cuda::Context& ctx() {
    std::unique_ptr<cuda::Context>& context = contexts_.at(current_);
    if (context == nullptr) context = std::make_unique<cuda::Context>(stream());
    return *context;
  }

  // Scratch of the current stream for a backend call's temporaries, valid until the next call
  // that asks for scratch on that stream. The kernels' own scratch is the context's; this one
  // is apart so that a kernel's request cannot move a buffer the call still uses.
  void* scratch(int64_t bytes) {
    Scratch& s = scratch_.at(current_);
    if (s.bytes < bytes_of(bytes)) {
      if (s.data != nullptr) STRATA_CUDA_CHECK(cudaFreeAsync(s.data, stream()));
      STRATA_CUDA_CHECK(cudaMallocAsync(&s.data, bytes_of(bytes), stream()));
      s.bytes = bytes_of(bytes);
    }
    return s.data;
  }

  // Host memory is pageable and the caller may reuse it at once: each transfer completes before
  // it returns.
  void upload(void* dst, const void* host, int64_t bytes) {
    if (bytes <= 0) return;
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(dst, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  struct Scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };

  int device_;
  size_t current_ = 0;
  std::array<cudaStream_t, kStreamCount> streams_{};
  std::array<std::unique_ptr<cuda::Context>, kStreamCount> contexts_{};
  std::array<Scratch, kStreamCount> scratch_{};
  std::array<cudaEvent_t, kStreamCount> release_events_{};
  cudaStream_t free_stream_ = nullptr;
  std::map<int64_t, cudaEvent_t> events_;
  std::vector<cudaEvent_t> marks_;
  size_t marks_used_ = 0;
};

// The kernels of kernels/cuda with storage type T (float: the parity variants; Bf16: training),
// queued on the device's current stream.
template <typename T>
class CudaKernels final : public Kernels<T> {
 public:
  explicit CudaKernels(CudaDevice& device) : device_(device) {}

  void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t n, int64_t c,
                      int64_t oc) override {
    cuda::matmul_forward(ctx(), dev(out), dev(inp), dev(weight), dev(bias), n, c, oc);
  }
  // The product into scratch, then added: cpu::matmul_forward_accumulate's result up to
  // rounding, as its contract allows.
  void matmul_forward_accumulate(T* out, const T* inp, const T* weight, int64_t n, int64_t c,
                                 int64_t oc) override {
    auto* product = static_cast<T*>(device_.scratch(n * oc * int64_t{sizeof(T)}));
    cuda::matmul_forward(ctx(), dev(product), dev(inp), dev(weight), kNone, n, c, oc);
    cuda::accumulate(ctx(), dev(out), dev(product), n * oc);
  }
  void matmul_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                       const T* weight, int64_t n, int64_t c, int64_t oc) override {
    cuda::matmul_backward(ctx(), dev(dinp), dweight, dbias, dev(dout), dev(inp), dev(weight), kNone,
                          n, c, oc);
  }
  void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                         const T* bias, int64_t n, int64_t c) override {
    cuda::layernorm_forward(ctx(), dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), n, c);
  }
  void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                          const T* weight, const float* mean, const float* rstd, int64_t n,
                          int64_t c) override {
    cuda::layernorm_backward(ctx(), dev(dinp), dweight, dbias, dev(dout), dev(inp), dev(weight),
                             mean, rstd, kNone, n, c);
  }
  // The statistics recomputed by the forward into scratch (its output discarded), then the
  // backward: the same kernels, so the bits of the saved-statistics path.
  void layernorm_backward_from_input(T* dinp, float* dweight, float* dbias, const T* dout,
                                     const T* inp, const T* weight, int64_t n, int64_t c) override {
    const auto [out, stats] = norm_scratch(n, c, 2);
    float* mean = stats;
    float* rstd = stats + n;
    cuda::layernorm_forward(ctx(), dev(out), mean, rstd, dev(inp), dev(weight), kNone, n, c);
    cuda::layernorm_backward(ctx(), dev(dinp), dweight, dbias, dev(dout), dev(inp), dev(weight),
                             mean, rstd, kNone, n, c);
  }
  void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t n,
                       int64_t c) override {
    cuda::rmsnorm_forward(ctx(), dev(out), rstd, dev(inp), dev(weight), n, c);
  }
  void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                        const float* rstd, int64_t n, int64_t c) override {
    cuda::rmsnorm_backward(ctx(), dev(dinp), dweight, dev(dout), dev(inp), dev(weight), rstd, kNone,
                           n, c);
  }
  void rmsnorm_backward_from_input(T* dinp, float* dweight, const T* dout, const T* inp,
                                   const T* weight, int64_t n, int64_t c) override {
    const auto [out, rstd] = norm_scratch(n, c, 1);
    cuda::rmsnorm_forward(ctx(), dev(out), rstd, dev(inp), dev(weight), n, c);
    cuda::rmsnorm_backward(ctx(), dev(dinp), dweight, dev(dout), dev(inp), dev(weight), rstd, kNone,
                           n, c);
  }
  void gelu_forward(T* out, const T* inp, int64_t n) override {
    cuda::gelu_forward(ctx(), dev(out), dev(inp), n);
  }
  void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) override {
    cuda::gelu_backward(ctx(), dev(dinp), dev(inp), dev(dout), n);
  }
  void swiglu_forward(T* out, const T* inp, int64_t n, int64_t h) override {
    cuda::swiglu_forward(ctx(), dev(out), dev(inp), n, h);
  }
  void swiglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) override {
    cuda::swiglu_backward(ctx(), dev(dinp), dev(inp), dev(dout), n, h);
  }
  void geglu_forward(T* out, const T* inp, int64_t n, int64_t h) override {
    cuda::geglu_forward(ctx(), dev(out), dev(inp), n, h);
  }
  void geglu_backward(T* dinp, const T* inp, const T* dout, int64_t n, int64_t h) override {
    cuda::geglu_backward(ctx(), dev(dinp), dev(inp), dev(dout), n, h);
  }
  void attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                         int64_t hs) override {
    cuda::attention_forward(ctx(), dev(out), dev(att), dev(qkv), b, t, nh, hs);
  }
  void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b, int64_t t,
                          int64_t nh, int64_t hs) override {
    cuda::attention_backward(ctx(), dev(dqkv), dev(dout), dev(qkv), dev(att), b, t, nh, hs);
  }
  // Multi-head attention over the whole causal prefix without dropout is path 1 (cuBLAS
  // products and a fused softmax), cpu::gqa_attention_forward's bits of cpu::attention_forward
  // for that case; the general kernel serves grouped heads, windows and dropout.
  static bool is_plain_attention(int64_t nh, int64_t nkv, int64_t window, const T* keep) {
    return nkv == nh && window == 0 && keep == nullptr;
  }
  void gqa_attention_forward(T* out, T* att, const T* qkv, int64_t b, int64_t t, int64_t nh,
                             int64_t nkv, int64_t hs, int64_t window, const T* keep,
                             float dropout_scale, T* dropped) override {
    if (is_plain_attention(nh, nkv, window, keep) && dropped == nullptr) {
      attention_forward(out, att, qkv, b, t, nh, hs);
      return;
    }
    cuda::gqa_attention_forward(ctx(), dev(out), dev(att), dev(qkv), b, t, nh, nkv, hs, window,
                                dev(keep), dropout_scale, dev(dropped));
  }
  void gqa_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* att, int64_t b,
                              int64_t t, int64_t nh, int64_t nkv, int64_t hs, int64_t window,
                              const T* keep, float dropout_scale) override {
    if (is_plain_attention(nh, nkv, window, keep)) {
      attention_backward(dqkv, dout, qkv, att, b, t, nh, hs);
      return;
    }
    cuda::gqa_attention_backward(ctx(), dev(dqkv), dev(dout), dev(qkv), dev(att), b, t, nh, nkv, hs,
                                 window, dev(keep), dropout_scale);
  }
  void rotary_forward(T* out, const T* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
                      int64_t row_stride, int64_t first_col, double theta) override {
    cuda::rotary_forward(ctx(), dev(out), dev(inp), b, t, heads, hs, row_stride, first_col, theta);
  }
  void rotary_backward(T* dinp, const T* dout, int64_t b, int64_t t, int64_t heads, int64_t hs,
                       int64_t row_stride, int64_t first_col, double theta) override {
    cuda::rotary_backward(ctx(), dev(dinp), dev(dout), b, t, heads, hs, row_stride, first_col,
                          theta);
  }
  void residual_forward(T* out, const T* residual, const T* branch, const T* bias, int64_t n,
                        int64_t c, const T* mask, float dropout_scale) override {
    cuda::residual_forward(ctx(), dev(out), dev(residual), dev(branch), dev(bias), n, c, dev(mask),
                           dropout_scale);
  }
  void residual_backward(float* dbias, const T* dout, int64_t n, int64_t c) override {
    cuda::bias_backward(ctx(), dbias, dev(dout), n, c);
  }
  // The row keys are host values (the runtime's): copied to the device first.
  void dropout_mask(T* mask, uint64_t stream, const uint64_t* row_keys, int64_t n, int64_t c,
                    double rate) override {
    if (n <= 0) return;
    const int64_t bytes = n * int64_t{sizeof(uint64_t)};
    auto* keys = static_cast<uint64_t*>(device_.scratch(bytes));
    device_.upload(keys, row_keys, bytes);
    cuda::dropout_mask(ctx(), dev(mask), stream, keys, n, c, rate);
  }
  void apply_dropout(T* out, const T* in, const T* mask, float dropout_scale, int64_t n) override {
    cuda::apply_dropout(ctx(), dev(out), dev(in), dev(mask), dropout_scale, n);
  }
  void accumulate(T* dst, const T* src, int64_t n) override {
    cuda::accumulate(ctx(), dev(dst), dev(src), n);
  }
  void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                         int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c) override {
    cuda::embedding_forward(ctx(), dev(out), tokens, dev(wte), dev(wpe), vocab_start, v, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens,
                          int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                          int64_t c) override {
    cuda::embedding_backward(ctx(), dwte, dwpe, dev(dout), tokens, vocab_start, v, b, t, c);
  }
  void row_max(float* maxes, const T* logits, int64_t n, int64_t v) override {
    cuda::row_max(ctx(), maxes, dev(logits), n, v);
  }
  void cross_entropy_partials(float* sums, float* targets_logit, const T* logits,
                              const float* maxes, const int32_t* targets, int64_t vocab_start,
                              int64_t n, int64_t v) override {
    cuda::cross_entropy_partials(ctx(), sums, targets_logit, dev(logits), maxes, targets,
                                 vocab_start, n, v);
  }
  void cross_entropy_losses(float* losses, const float* sums, const float* maxes,
                            const float* targets_logit, int64_t n) override {
    cuda::cross_entropy_losses(ctx(), losses, sums, maxes, targets_logit, n);
  }
  void cross_entropy_backward(T* dlogits, const T* logits, const float* maxes, const float* sums,
                              const int32_t* targets, int64_t vocab_start, float scale, int64_t n,
                              int64_t v) override {
    cuda::cross_entropy_backward(ctx(), dev(dlogits), dev(logits), maxes, sums, targets,
                                 vocab_start, scale, n, v);
  }
  void sum_of_squares(double* total, const float* x, int64_t n) override {
    cuda::sum_of_squares(ctx(), total, x, n);
  }
  // Without a master (fp32 training) the fp32 parameter is its own master copy. The clip factor
  // is computed on the device from the squared norm (kernels/cuda/adamw.cu).
  void adamw_update(T* param, float* master, const float* grad, float* m, float* v, int64_t n,
                    const cpu::AdamWConfig& config, int64_t step, const double* norm_squared,
                    double max_norm) override {
    STRATA_ASSERT((master != nullptr || std::is_same_v<T, float>),
                  "bf16 parameters have an fp32 master copy");
    float* masters = master != nullptr ? master : reinterpret_cast<float*>(param);
    DeviceType<T>* rounded = master != nullptr ? dev(param) : nullptr;
    cuda::adamw_update(ctx(), rounded, masters, grad, m, v, n, config, step, norm_squared,
                       max_norm);
  }

 private:
  // Scratch for a norm recomputed from its input: the discarded output (n, c) at the start, as
  // aligned as the kernels' vector path wants, then `rows` fp32 statistics of n each.
  std::pair<T*, float*> norm_scratch(int64_t n, int64_t c, int64_t rows) {
    constexpr int64_t kAlign = 16;
    const int64_t out_bytes = (n * c * int64_t{sizeof(T)} + kAlign - 1) / kAlign * kAlign;
    auto* base =
        static_cast<std::byte*>(device_.scratch(out_bytes + rows * n * int64_t{sizeof(float)}));
    return {reinterpret_cast<T*>(base), reinterpret_cast<float*>(base + out_bytes)};
  }

  // An absent operand (no bias, no pre-GELU input, no residual gradient).
  static constexpr const DeviceType<T>* kNone = nullptr;

  cuda::Context& ctx() { return device_.ctx(); }

  CudaDevice& device_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device), fp32_(device_), bf16_(device_) {}

  const char* name() const override { return "cuda"; }
  Kernels<float>& fp32() override { return fp32_; }
  Kernels<Bf16>* bf16() override { return &bf16_; }

  // Memory: stream-ordered on the current stream (cudaMallocAsync, then zeros), so the task that
  // allocates and every task that waits for it see the zeros.
  void* allocate_bytes(int64_t bytes) override {
    void* data = nullptr;
    STRATA_CUDA_CHECK(cudaMallocAsync(&data, bytes_of(bytes), device_.stream()));
    STRATA_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes_of(bytes), device_.stream()));
    return data;
  }
  // A tensor may still be in use on any of the rank's streams: the free waits, on a stream of
  // its own, for everything queued so far on each of them, and no compute stream waits for it.
  void release(void* data) override {
    for (size_t s = 0; s < device_.streams_.size(); ++s) {
      if (device_.streams_[s] == nullptr) continue;
      cudaEvent_t& event = device_.release_events_[s];
      if (event == nullptr) {
        STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      }
      STRATA_CUDA_CHECK(cudaEventRecord(event, device_.streams_[s]));
      STRATA_CUDA_CHECK(cudaStreamWaitEvent(device_.free_stream_, event, 0));
    }
    STRATA_CUDA_CHECK(cudaFreeAsync(data, device_.free_stream_));
  }
  void fill_zero_bytes(void* data, int64_t bytes) override {
    if (bytes <= 0) return;
    STRATA_CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<size_t>(bytes), device_.stream()));
  }
  void copy_bytes(void* dst, const void* src, int64_t bytes) override {
    if (dst == src || bytes <= 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                      cudaMemcpyDeviceToDevice, device_.stream()));
  }
  void copy_2d_bytes(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                     int64_t row_bytes) override {
    if (rows <= 0 || row_bytes <= 0) return;
    STRATA_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src,
                                        static_cast<size_t>(src_pitch),
                                        static_cast<size_t>(row_bytes), static_cast<size_t>(rows),
                                        cudaMemcpyDeviceToDevice, device_.stream()));
  }
  void upload_bytes(void* dst, const void* host, int64_t bytes) override {
    device_.upload(dst, host, bytes);
  }
  void download_bytes(void* host, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost,
                                      device_.stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(device_.stream()));
  }

  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) override {
    if (dst_dtype == src_dtype) {
      copy_bytes(dst, src, n * bytes_per_element(dst_dtype));
    } else if (dst_dtype == DType::kBf16 && src_dtype == DType::kFp32) {
      cuda::convert(device_.ctx(), static_cast<cuda::bf16*>(dst), static_cast<const float*>(src),
                    n);
    } else {
      STRATA_ASSERT(
          dst_dtype == DType::kFp32 && src_dtype == DType::kBf16,
          fmt::format("no conversion from {} to {}", to_string(src_dtype), to_string(dst_dtype)));
      cuda::convert(device_.ctx(), static_cast<float*>(dst), static_cast<const cuda::bf16*>(src),
                    n);
    }
  }

  void reduce_in_order(float* out, std::span<const float* const> inputs, int64_t n,
                       ReduceOp op) override {
    reduce_in_order_typed(out, inputs, n, op);
  }
  void reduce_in_order(double* out, std::span<const double* const> inputs, int64_t n,
                       ReduceOp op) override {
    reduce_in_order_typed(out, inputs, n, op);
  }
  void reduce_in_order(Bf16* out, std::span<const Bf16* const> inputs, int64_t n,
                       ReduceOp op) override {
    reduce_in_order_typed(out, inputs, n, op);
  }

  void* native_stream() override { return device_.stream(); }
  void set_stream(Stream stream) override { device_.current_ = static_cast<size_t>(stream); }
  void record_event(Stream stream, int64_t event) override {
    auto [it, added] = device_.events_.try_emplace(event, nullptr);
    if (added) STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&it->second, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventRecord(it->second, device_.stream_of(stream)));
  }
  void wait_event(Stream stream, int64_t event) override {
    const auto it = device_.events_.find(event);
    if (it == device_.events_.end()) {
      throw std::logic_error(fmt::format("wait_event: event {} was never recorded", event));
    }
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(device_.stream_of(stream), it->second, 0));
  }
  std::shared_ptr<const SharedEvent> record_shared_event() override {
    return std::make_shared<const CudaSharedEvent>(device_.stream());
  }
  void wait_shared_event(const SharedEvent& event) override {
    const auto* cuda_event = dynamic_cast<const CudaSharedEvent*>(&event);
    STRATA_ASSERT(cuda_event != nullptr, "a shared event from another CUDA backend");
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(device_.stream(), cuda_event->event(), 0));
  }
  void synchronize() override {
    for (cudaStream_t stream : device_.streams_) {
      if (stream != nullptr) STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    STRATA_CUDA_CHECK(cudaStreamSynchronize(device_.free_stream_));
  }

  // Timing events, made on a step's first need and reused by the next steps.
  void clear_marks() override { device_.marks_used_ = 0; }
  int64_t mark(Stream stream) override {
    std::vector<cudaEvent_t>& marks = device_.marks_;
    if (device_.marks_used_ == marks.size()) {
      cudaEvent_t event = nullptr;
      STRATA_CUDA_CHECK(cudaEventCreate(&event));
      marks.push_back(event);
    }
    STRATA_CUDA_CHECK(cudaEventRecord(marks[device_.marks_used_], device_.stream_of(stream)));
    return static_cast<int64_t>(device_.marks_used_++);
  }
  // cudaEventElapsedTime's milliseconds (a resolution of about 0.5 us, CUDA runtime API docs).
  int64_t mark_ns(int64_t index) override {
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, device_.marks_.at(0),
                                           device_.marks_.at(static_cast<size_t>(index))));
    return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

 private:
  template <typename T>
  void reduce_in_order_typed(T* out, std::span<const T* const> inputs, int64_t n, ReduceOp op) {
    std::vector<const DeviceType<T>*> pointers;
    for (const T* input : inputs) pointers.push_back(dev(input));
    cuda::reduce_in_order(device_.ctx(), dev(out), pointers.data(),
                          static_cast<int>(pointers.size()), n, op == ReduceOp::kMax);
  }

  CudaDevice device_;
  CudaKernels<float> fp32_;
  CudaKernels<Bf16> bf16_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<CudaBackend>(device);
}

int cuda_device_count() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();  // clear the error of a failed query
    return 0;
  }
  return devices;
}

}  // namespace strata
