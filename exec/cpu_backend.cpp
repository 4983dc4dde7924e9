// The CPU backend: every call runs at once on the calling thread (the rank's), so streams are in
// order by construction and events are complete when recorded.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "exec/backend.hpp"
#include "exec/communicator.hpp"

namespace strata {

namespace {

template <typename T>
void reduce_on_host(T* out, std::span<const T* const> inputs, int64_t n, ReduceOp op) {
  STRATA_ASSERT(!inputs.empty(), "a reduction has inputs");
  std::copy_n(inputs[0], n, out);
  for (const T* input : inputs.subspan(1)) {
    for (int64_t k = 0; k < n; ++k) out[k] = reduce_step(out[k], input[k], op);
  }
}

// Rows per block when a norm's backward recomputes its statistics from the input: the discarded
// forward output needs a (64,C) scratch rather than (N,C).
constexpr int64_t kRecomputeRows = 64;

class CpuBackend final : public Backend, public Kernels<float> {
 public:
  const char* name() const override { return "cpu"; }
  Kernels<float>& fp32() override { return *this; }

  void* allocate_bytes(int64_t bytes) override {
    return std::calloc(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 1);
  }
  void release(void* data) override { std::free(data); }
  void fill_zero_bytes(void* data, int64_t bytes) override {
    if (bytes > 0) std::memset(data, 0, static_cast<size_t>(bytes));
  }
  void copy_bytes(void* dst, const void* src, int64_t bytes) override {
    if (dst != src && bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  void copy_2d_bytes(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch, int64_t rows,
                     int64_t row_bytes) override {
    for (int64_t r = 0; r < rows; ++r) {
      copy_bytes(static_cast<std::byte*>(dst) + r * dst_pitch,
                 static_cast<const std::byte*>(src) + r * src_pitch, row_bytes);
    }
  }
  void upload_bytes(void* dst, const void* host, int64_t bytes) override {
    copy_bytes(dst, host, bytes);
  }
  void download_bytes(void* host, const void* src, int64_t bytes) override {
    copy_bytes(host, src, bytes);
  }
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) override {
    convert_on_host(dst, dst_dtype, src, src_dtype, n);
  }

  void reduce_in_order(float* out, std::span<const float* const> inputs, int64_t n,
                       ReduceOp op) override {
    reduce_on_host(out, inputs, n, op);
  }
  void reduce_in_order(double* out, std::span<const double* const> inputs, int64_t n,
                       ReduceOp op) override {
    reduce_on_host(out, inputs, n, op);
  }
  void reduce_in_order(Bf16* out, std::span<const Bf16* const> inputs, int64_t n,
                       ReduceOp op) override {
    reduce_on_host(out, inputs, n, op);
  }

  void set_stream(Stream) override {}
  void record_event(Stream, int64_t) override {}
  void wait_event(Stream, int64_t) override {}
  // Every call is done when it returns: an event is complete once recorded.
  std::shared_ptr<const SharedEvent> record_shared_event() override {
    return std::make_shared<const SharedEvent>();
  }
  void wait_shared_event(const SharedEvent&) override {}
  void synchronize() override {}

  void clear_marks() override { marks_.clear(); }
  int64_t mark(Stream) override {
    marks_.push_back(std::chrono::steady_clock::now());
    return static_cast<int64_t>(marks_.size()) - 1;
  }
  int64_t mark_ns(int64_t index) override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               marks_.at(static_cast<size_t>(index)) - marks_.front())
        .count();
  }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t n, int64_t c, int64_t oc) override {
    cpu::matmul_forward(out, inp, weight, bias, n, c, oc);
  }
  void matmul_forward_accumulate(float* out, const float* inp, const float* weight, int64_t n,
                                 int64_t c, int64_t oc) override {
    cpu::matmul_forward_accumulate(out, inp, weight, n, c, oc);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int64_t n, int64_t c,
                       int64_t oc) override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, n, c, oc);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int64_t n, int64_t c) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, n, c);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int64_t n, int64_t c) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n, c);
  }
  // Blocks of rows in order: layernorm_forward's statistics of a row depend on that row alone,
  // and layernorm_backward adds into dweight and dbias row by row, so the blocks give the bits of
  // one call over all N rows. The recomputed output is discarded.
  void layernorm_backward_from_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                     const float* inp, const float* weight, int64_t n,
                                     int64_t c) override {
    if (n <= 0) return;
    const int64_t rows = std::min(n, kRecomputeRows);
    std::vector<float> out(static_cast<size_t>(rows * c));
    std::vector<float> mean(static_cast<size_t>(rows));
    std::vector<float> rstd(static_cast<size_t>(rows));
    for (int64_t first = 0; first < n; first += rows) {
      const int64_t count = std::min(rows, n - first);
      const float* inp_block = inp + first * c;
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp_block, weight,
                             static_cast<const float*>(nullptr), count, c);
      cpu::layernorm_backward(dinp + first * c, dweight, dbias, dout + first * c, inp_block, weight,
                              mean.data(), rstd.data(), count, c);
    }
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t n,
                       int64_t c) override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, n, c);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, int64_t n, int64_t c) override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, n, c);
  }
  // As layernorm_backward_from_input, in blocks of rows for the same reason.
  void rmsnorm_backward_from_input(float* dinp, float* dweight, const float* dout, const float* inp,
                                   const float* weight, int64_t n, int64_t c) override {
    if (n <= 0) return;
    const int64_t rows = std::min(n, kRecomputeRows);
    std::vector<float> out(static_cast<size_t>(rows * c));
    std::vector<float> rstd(static_cast<size_t>(rows));
    for (int64_t first = 0; first < n; first += rows) {
      const int64_t count = std::min(rows, n - first);
      const float* inp_block = inp + first * c;
      cpu::rmsnorm_forward(out.data(), rstd.data(), inp_block, weight, count, c);
      cpu::rmsnorm_backward(dinp + first * c, dweight, dout + first * c, inp_block, weight,
                            rstd.data(), count, c);
    }
  }
  void gelu_forward(float* out, const float* inp, int64_t n) override {
    cpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  void swiglu_forward(float* out, const float* inp, int64_t n, int64_t h) override {
    cpu::swiglu_forward(out, inp, n, h);
  }
  void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                       int64_t h) override {
    cpu::swiglu_backward(dinp, inp, dout, n, h);
  }
  void geglu_forward(float* out, const float* inp, int64_t n, int64_t h) override {
    cpu::geglu_forward(out, inp, n, h);
  }
  void geglu_backward(float* dinp, const float* inp, const float* dout, int64_t n,
                      int64_t h) override {
    cpu::geglu_backward(dinp, inp, dout, n, h);
  }
  void attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t, int64_t nh,
                         int64_t hs) override {
    cpu::attention_forward(out, att, qkv, b, t, nh, hs);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                          int64_t b, int64_t t, int64_t nh, int64_t hs) override {
    cpu::attention_backward(dqkv, dout, qkv, att, b, t, nh, hs);
  }
  void gqa_attention_forward(float* out, float* att, const float* qkv, int64_t b, int64_t t,
                             int64_t nh, int64_t nkv, int64_t hs, int64_t window, const float* keep,
                             float dropout_scale, float* dropped) override {
    cpu::gqa_attention_forward(out, att, qkv, b, t, nh, nkv, hs, window, keep, dropout_scale,
                               dropped);
  }
  void gqa_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                              int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs,
                              int64_t window, const float* keep, float dropout_scale) override {
    cpu::gqa_attention_backward(dqkv, dout, qkv, att, b, t, nh, nkv, hs, window, keep,
                                dropout_scale);
  }
  void rotary_forward(float* out, const float* inp, int64_t b, int64_t t, int64_t heads, int64_t hs,
                      int64_t row_stride, int64_t first_col, double theta) override {
    cpu::rotary_forward(out, inp, b, t, heads, hs, row_stride, first_col, theta);
  }
  void rotary_backward(float* dinp, const float* dout, int64_t b, int64_t t, int64_t heads,
                       int64_t hs, int64_t row_stride, int64_t first_col, double theta) override {
    cpu::rotary_backward(dinp, dout, b, t, heads, hs, row_stride, first_col, theta);
  }
  void residual_forward(float* out, const float* residual, const float* branch, const float* bias,
                        int64_t n, int64_t c, const float* mask, float dropout_scale) override {
    cpu::residual_forward(out, residual, branch, bias, n, c, mask, dropout_scale);
  }
  void residual_backward(float* dbias, const float* dout, int64_t n, int64_t c) override {
    cpu::residual_backward(dbias, dout, n, c);
  }
  void dropout_mask(float* mask, uint64_t stream, const uint64_t* row_keys, int64_t n, int64_t c,
                    double rate) override {
    cpu::dropout_mask(mask, stream, row_keys, n, c, rate);
  }
  void apply_dropout(float* out, const float* in, const float* mask, float dropout_scale,
                     int64_t n) override {
    cpu::apply_dropout(out, in, mask, dropout_scale, n);
  }
  void accumulate(float* dst, const float* src, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t vocab_start, int64_t v, int64_t b, int64_t t, int64_t c) override {
    cpu::embedding_forward(out, tokens, wte, wpe, vocab_start, v, b, t, c);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t vocab_start, int64_t v, int64_t b, int64_t t,
                          int64_t c) override {
    cpu::embedding_backward(dwte, dwpe, dout, tokens, vocab_start, v, b, t, c);
  }
  void row_max(float* maxes, const float* logits, int64_t n, int64_t v) override {
    cpu::row_max(maxes, logits, n, v);
  }
  void cross_entropy_partials(float* sums, float* targets_logit, const float* logits,
                              const float* maxes, const int32_t* targets, int64_t vocab_start,
                              int64_t n, int64_t v) override {
    cpu::cross_entropy_partials(sums, targets_logit, logits, maxes, targets, vocab_start, n, v);
  }
  void cross_entropy_losses(float* losses, const float* sums, const float* maxes,
                            const float* targets_logit, int64_t n) override {
    cpu::cross_entropy_losses(losses, sums, maxes, targets_logit, n);
  }
  void cross_entropy_backward(float* dlogits, const float* logits, const float* maxes,
                              const float* sums, const int32_t* targets, int64_t vocab_start,
                              float scale, int64_t n, int64_t v) override {
    cpu::cross_entropy_backward(dlogits, logits, maxes, sums, targets, vocab_start, scale, n, v);
  }
  void sum_of_squares(double* total, const float* x, int64_t n) override {
    *total += cpu::sum_of_squares(x, n);
  }
  // With a master copy, the update runs on it and the param takes its values.
  void adamw_update(float* param, float* master, const float* grad, float* m, float* v, int64_t n,
                    const cpu::AdamWConfig& config, int64_t step, const double* norm_squared,
                    double max_norm) override {
    cpu::adamw_update(master != nullptr ? master : param, grad, m, v, n, config, step,
                      cpu::clip_factor(std::sqrt(*norm_squared), max_norm));
    if (master != nullptr) copy(param, master, n);
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace strata
