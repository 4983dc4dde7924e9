// The CUDA backend: the graph's streams as non-blocking CUDA streams, an event per task, and the
// fp32 variants of kernels/cuda behind the contracts of kernels/cpu (exec/backend.hpp).

#include "exec/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/kernels.hpp"

namespace strata {

namespace {

size_t bytes_of(int64_t elements, size_t size) {
  return static_cast<size_t>(std::max<int64_t>(elements, 1)) * size;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    const int devices = cuda_device_count();
    if (device < 0 || device >= devices) {
      throw std::runtime_error(fmt::format(
          "the cuda backend needs CUDA device {}, and this machine has {}", device, devices));
    }
    STRATA_CUDA_CHECK(cudaSetDevice(device_));
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&free_stream_, cudaStreamNonBlocking));
  }

  ~CudaBackend() override {
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

  const char* name() const override { return "cuda"; }

  // Memory: stream-ordered on the current stream (cudaMallocAsync, then zeros), so the task that
  // allocates and every task that waits for it see the zeros.
  float* allocate(int64_t elements) override {
    return static_cast<float*>(zeroed(bytes_of(elements, sizeof(float))));
  }
  int32_t* allocate_tokens(int64_t elements) override {
    return static_cast<int32_t*>(zeroed(bytes_of(elements, sizeof(int32_t))));
  }
  // A tensor may still be in use on any of the rank's streams: the free waits, on a stream of
  // its own, for everything queued so far on each of them, and no compute stream waits for it.
  void release(void* data) override {
    for (size_t s = 0; s < streams_.size(); ++s) {
      if (streams_[s] == nullptr) continue;
      cudaEvent_t& event = release_events_[s];
      if (event == nullptr) {
        STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      }
      STRATA_CUDA_CHECK(cudaEventRecord(event, streams_[s]));
      STRATA_CUDA_CHECK(cudaStreamWaitEvent(free_stream_, event, 0));
    }
    STRATA_CUDA_CHECK(cudaFreeAsync(data, free_stream_));
  }
  void fill_zero(float* data, int64_t n) override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes_of(n, sizeof(float)), stream()));
  }
  void copy(float* dst, const float* src, int64_t n) override {
    if (dst == src || n <= 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream()));
  }
  void copy_2d(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t cols) override {
    if (rows <= 0 || cols <= 0) return;
    STRATA_CUDA_CHECK(cudaMemcpy2DAsync(
        dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
        static_cast<size_t>(src_stride) * sizeof(float), static_cast<size_t>(cols) * sizeof(float),
        static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream()));
  }
  // Host memory is pageable and the caller may reuse it at once: each transfer completes before
  // it returns.
  void upload(float* dst, std::span<const float> host) override {
    upload_bytes(dst, host.data(), host.size_bytes());
  }
  void upload_tokens(int32_t* dst, std::span<const int32_t> host) override {
    upload_bytes(dst, host.data(), host.size_bytes());
  }
  void download(std::span<float> host, const float* src) override {
    if (host.empty()) return;
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(host.data(), src, host.size_bytes(), cudaMemcpyDeviceToHost, stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  void* native_stream() override { return stream(); }
  void set_stream(Stream stream) override { current_ = static_cast<size_t>(stream); }
  void record_event(Stream stream, int64_t event) override {
    auto [it, added] = events_.try_emplace(event, nullptr);
    if (added) STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&it->second, cudaEventDisableTiming));
    STRATA_CUDA_CHECK(cudaEventRecord(it->second, stream_of(stream)));
  }
  void wait_event(Stream stream, int64_t event) override {
    const auto it = events_.find(event);
    if (it == events_.end()) {
      throw std::logic_error(fmt::format("wait_event: event {} was never recorded", event));
    }
    STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream_of(stream), it->second, 0));
  }
  void synchronize() override {
    for (cudaStream_t stream : streams_) {
      if (stream != nullptr) STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    STRATA_CUDA_CHECK(cudaStreamSynchronize(free_stream_));
  }

  // Timing events, made on a step's first need and reused by the next steps.
  void clear_marks() override { marks_used_ = 0; }
  int64_t mark(Stream stream) override {
    if (marks_used_ == marks_.size()) {
      cudaEvent_t event = nullptr;
      STRATA_CUDA_CHECK(cudaEventCreate(&event));
      marks_.push_back(event);
    }
    STRATA_CUDA_CHECK(cudaEventRecord(marks_[marks_used_], stream_of(stream)));
    return static_cast<int64_t>(marks_used_++);
  }
  // cudaEventElapsedTime's milliseconds (a resolution of about 0.5 us, CUDA runtime API docs).
  int64_t mark_ns(int64_t index) override {
    float ms = 0;
    STRATA_CUDA_CHECK(
        cudaEventElapsedTime(&ms, marks_.at(0), marks_.at(static_cast<size_t>(index))));
    return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t n, int64_t c, int64_t oc) override {
    cuda::matmul_forward<float>(ctx(), out, inp, weight, bias, n, c, oc);
  }
  // The product into scratch, then added: cpu::matmul_forward_accumulate's result up to
  // rounding, as its contract allows.
  void matmul_forward_accumulate(float* out, const float* inp, const float* weight, int64_t n,
                                 int64_t c, int64_t oc) override {
    float* product = scratch(n * oc);
    cuda::matmul_forward<float>(ctx(), product, inp, weight, nullptr, n, c, oc);
    cuda::accumulate<float>(ctx(), out, product, n * oc);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t n, int64_t c,
                       int64_t oc) override {
    cuda::matmul_backward<float>(ctx(), dinp, dweight, dbias, dout, inp, weight, nullptr, n, c, oc);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t n, int64_t c) override {
    cuda::layernorm_forward<float>(ctx(), out, mean, rstd, inp, weight, bias, n, c);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t n, int64_t c) override {
    cuda::layernorm_backward<float>(ctx(), dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                    nullptr, n, c);
  }
  // The statistics recomputed by the forward into scratch (its output discarded), then the
  // backward: the same kernels, so the bits of the saved-statistics path.
  void layernorm_backward_from_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                     const float* inp, const float* weight, int64_t n,
                                     int64_t c) override {
    float* out = scratch(n * c + 2 * n);
    float* mean = out + n * c;
    float* rstd = mean + n;
    cuda::layernorm_forward<float>(ctx(), out, mean, rstd, inp, weight, nullptr, n, c);
    cuda::layernorm_backward<float>(ctx(), dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                    nullptr, n, c);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t n,
                       int64_t c) override {
    cuda::rmsnorm_forward<float>(ctx(), out, rstd, inp, weight, n, c);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int64_t n, int64_t c) override {
    cuda::rmsnorm_backward<float>(ctx(), dinp, dweight, dout, inp, weight, rstd, nullptr, n, c);
  }
  void rmsnorm_backward_from_input(float* dinp, float* dweight, const float* dout, const float* inp,
                                   const float* weight, int64_t n, int64_t c) override {
    float* out = scratch(n * c + n);
    float* rstd = out + n * c;
    cuda::rmsnorm_forward<float>(ctx(), out, rstd, inp, weight, n, c);
    cuda::rmsnorm_backward<float>(ctx(), dinp, dweight, dout, inp, weight, rstd, nullptr, n, c);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) override {
    cuda::gelu_forward<float>(ctx(), out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cuda::gelu_backward<float>(ctx(), dinp, inp, dout, n);
  }
  void swiglu_forward(float* out, const float* inp, int64_t n, int64_t h) override {
    cuda::swiglu_forward<float>(ctx(), out, inp, n, h);
  }
  void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                       int64_t h) override {
    cuda::swiglu_backward<float>(ctx(), dinp, inp, dout, n, h);
  }
  void geglu_forward(float* out, const float* inp, int64_t n, int64_t h) override {
    cuda::geglu_forward<float>(ctx(), out, inp, n, h);
  }
  void geglu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                      int64_t h) override {
    cuda::geglu_backward<float>(ctx(), dinp, inp, dout, n, h);
  }
  void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t nh,
                         int64_t hs) override {
    cuda::attention_forward<float>(ctx(), out, att, qkv, b, t, nh, hs);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          int64_t b, int64_t t, int64_t nh, int64_t hs) override {
    cuda::attention_backward<float>(ctx(), dqkv, dout, qkv, att, b, t, nh, hs);
  }
  // Multi-head attention over the whole causal prefix without dropout is path 1 (cuBLAS
  // products and a fused softmax), cpu::gqa_attention_forward's bits of cpu::attention_forward
  // for that case; the general kernel serves grouped heads, windows and dropout.
  static bool is_plain_attention(int64_t nh, int64_t nkv, int64_t window, const float* keep) {
    return nkv == nh && window == 0 && keep == nullptr;
  }
  void gqa_attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hs, int64_t window, const float* keep,
                             float dropout_scale, float* dropped) override {
    if (is_plain_attention(nh, nkv, window, keep) && dropped == nullptr) {
      cuda::attention_forward<float>(ctx(), out, att, qkv, b, t, nh, hs);
      return;
    }
    cuda::gqa_attention_forward<float>(ctx(), out, att, qkv, b, t, nh, nkv, hs, window, keep,
                                       dropout_scale, dropped);
  }
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                              int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                              int64_t window, const float* keep, float dropout_scale) override {
    if (is_plain_attention(nh, nkv, window, keep)) {
      cuda::attention_backward<float>(ctx(), dqkv, dout, qkv, att, b, t, nh, hs);
      return;
    }
    cuda::gqa_attention_backward<float>(ctx(), dqkv, dout, qkv, att, b, t, nh, nkv, hs, window,
                                        keep, dropout_scale);
  }
  void rotary_forward(float* out, const float* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
                      int64_t row_stride, int64_t first_col, double theta) override {
    cuda::rotary_forward<float>(ctx(), out, inp, b, t, heads, hs, row_stride, first_col, theta);
  }
  void rotary_backward(float* dinp, const float* dout, int64_t b, int64_t t, int64_t heads,
                       int64_t hs, int64_t row_stride, int64_t first_col, double theta) override {
    cuda::rotary_backward<float>(ctx(), dinp, dout, b, t, heads, hs, row_stride, first_col, theta);
  }
  void residual_forward(float* out, const float* residual, const float* branch, const float* bias,
                        int64_t n, int64_t c, const float* mask, float dropout_scale) override {
    cuda::residual_forward<float>(ctx(), out, residual, branch, bias, n, c, mask, dropout_scale);
  }
  void residual_backward(float* dbias, const float* dout, int64_t n, int64_t c) override {
    cuda::bias_backward<float>(ctx(), dbias, dout, n, c);
  }
  // The row keys are host values (the runtime's): copied to the device first.
  void dropout_mask(float* mask, uint64_t stream, const uint64_t* row_keys, int64_t n, int64_t c,
                    double rate) override {
    if (n <= 0) return;
    auto* keys = reinterpret_cast<uint64_t*>(scratch(2 * n));
    upload_bytes(keys, row_keys, static_cast<size_t>(n) * sizeof(uint64_t));
    cuda::dropout_mask<float>(ctx(), mask, stream, keys, n, c, rate);
  }
  void apply_dropout(float* out, const float* in, const float* mask, float dropout_scale,
                     int64_t n) override {
    cuda::apply_dropout<float>(ctx(), out, in, mask, dropout_scale, n);
  }
  void accumulate(float* dst, const float* src, int64_t n) override {
    cuda::accumulate<float>(ctx(), dst, src, n);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c) override {
    cuda::embedding_forward<float>(ctx(), out, tokens, wte, wpe, vocab_start, v, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                          int64_t c) override {
    cuda::embedding_backward<float>(ctx(), dwte, dwpe, dout, tokens, vocab_start, v, b, t, c);
  }
  void row_max(float* maxes, const float* logits, int64_t n, int64_t v) override {
    cuda::row_max<float>(ctx(), maxes, logits, n, v);
  }
  void cross_entropy_partials(float* sums, float* targets_logit, const float* logits,
                              const float* maxes, const int32_t* targets, int64_t vocab_start,
                              int64_t n, int64_t v) override {
    cuda::cross_entropy_partials<float>(ctx(), sums, targets_logit, logits, maxes, targets,
                                        vocab_start, n, v);
  }
  void cross_entropy_losses(float* losses, const float* sums, const float* maxes,
                            const float* targets_logit, int64_t n) override {
    cuda::cross_entropy_losses(ctx(), losses, sums, maxes, targets_logit, n);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* maxes,
                              const float* sums, const int32_t* targets, int64_t vocab_start,
                              float scale, int64_t n, int64_t v) override {
    cuda::cross_entropy_backward<float>(ctx(), dlogits, logits, maxes, sums, targets, vocab_start,
                                        scale, n, v);
  }
  // On the device in fp64, read back at once: the runtime sums the tensors' parts on the host.
  double sum_of_squares(const float* x, int64_t n) override {
    auto* total = reinterpret_cast<double*>(scratch(2));
    STRATA_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(double), stream()));
    cuda::sum_of_squares(ctx(), total, x, n);
    double result = 0;
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(&result, total, sizeof(double), cudaMemcpyDeviceToHost, stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return result;
  }
  // fp32 training: the parameter is its own master copy.
  void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                    const cpu::AdamWConfig& config, int64_t step, double grad_scale) override {
    cuda::adamw_update<float>(ctx(), nullptr, param, grad, m, v, n, config, step,
                              static_cast<float>(grad_scale));
  }

 private:
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
  float* scratch(int64_t elements) {
    const size_t bytes = bytes_of(elements, sizeof(float));
    Scratch& s = scratch_.at(current_);
    if (s.bytes < bytes) {
      if (s.data != nullptr) STRATA_CUDA_CHECK(cudaFreeAsync(s.data, stream()));
      STRATA_CUDA_CHECK(cudaMallocAsync(&s.data, bytes, stream()));
      s.bytes = bytes;
    }
    return static_cast<float*>(s.data);
  }

  void* zeroed(size_t bytes) {
    void* data = nullptr;
    STRATA_CUDA_CHECK(cudaMallocAsync(&data, bytes, stream()));
    STRATA_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream()));
    return data;
  }

  void upload_bytes(void* dst, const void* host, size_t bytes) {
    if (bytes == 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream()));
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
