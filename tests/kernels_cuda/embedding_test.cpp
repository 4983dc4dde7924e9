// The embedding on the GPU (kernels/cuda/embedding.cu) against the float64 CPU reference on the
// same inputs rounded to T: whole vocabularies and shards with tokens outside them, long runs of
// repeated tokens, widths that are and are not multiples of the 16-byte pack, with and without
// positions; and the backward's bits the same run after run.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.hpp"
#include "kernels/cuda/kernels.hpp"
#include "tests/kernels_cuda/device_buffers.hpp"

namespace strata::cuda {
namespace {

using test::DeviceBuffer;
using test::download;
using test::poison;
using test::random_floats;
using test::random_tokens;
using test::rounded;
using test::upload;
using test::upload_tokens;

// Tokens drawn from [0, vocab); the shard holds [vocab_start, vocab_start + v).
struct EmbeddingCase {
  int32_t vocab;
  int64_t vocab_start, v, b, t, c;
  bool with_wpe;
  std::string describe() const {
    std::ostringstream text;
    text << "tokens in [0," << vocab << "), shard [" << vocab_start << "," << vocab_start + v
         << "), B = " << b << ", T = " << t << ", C = " << c << (with_wpe ? ", wpe" : ", no wpe");
    return text.str();
  }
};

// C = 1 and 37 are no multiple of a pack (the scalar kernels), 12 is of fp32's 4 but not of
// bf16's 8, 768 is of both. The shards [20,45) of 64 and [1,2) of 3 leave tokens outside; the
// vocabularies of 3 make runs of about 170 equal tokens in N = 512.
const std::vector<EmbeddingCase> kCases = {
    {50, 0, 50, 3, 11, 1, true},  {50, 0, 50, 3, 11, 37, false},  {50, 0, 50, 2, 16, 768, true},
    {64, 20, 25, 4, 9, 37, true}, {64, 20, 25, 4, 9, 768, false}, {64, 20, 25, 5, 7, 12, true},
    {3, 0, 3, 4, 128, 37, true},  {3, 0, 3, 4, 128, 768, true},   {3, 1, 1, 4, 128, 1, false},
};

std::vector<double> to_double(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// What an accumulated gradient gained: after - before, in float64.
std::vector<double> increment(const std::vector<float>& after, const std::vector<float>& before) {
  std::vector<double> d(after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    d[i] = static_cast<double>(after[i]) - static_cast<double>(before[i]);
  }
  return d;
}

TEMPLATE_TEST_CASE("embedding forward on the GPU matches the float64 CPU reference",
                   "[gpu][embedding]", float, bf16) {
  // out[b,t] = wte[token - vocab_start] (0 outside the shard) + wpe[t] (when given), as
  // kernels/cpu/embedding.cpp; out is poisoned first, so a row left unwritten fails.
  Context ctx;
  uint64_t seed = 1;
  for (const EmbeddingCase& cs : kCases) {
    INFO(cs.describe());
    const int64_t n = cs.b * cs.t;
    const std::vector<int32_t> tokens = random_tokens(static_cast<size_t>(n), seed++, cs.vocab);
    const std::vector<float> wte = rounded<TestType>(random_floats(cs.v * cs.c, seed++));
    const std::vector<float> wpe = rounded<TestType>(random_floats(cs.t * cs.c, seed++));
    const DeviceBuffer<int32_t> d_tokens = upload_tokens(tokens);
    const DeviceBuffer<TestType> d_wte = upload<TestType>(wte);
    const DeviceBuffer<TestType> d_wpe = upload<TestType>(wpe);
    DeviceBuffer<TestType> d_out(static_cast<size_t>(n * cs.c));
    poison(d_out);

    embedding_forward(ctx, d_out.data(), d_tokens.data(), d_wte.data(),
                      cs.with_wpe ? d_wpe.data() : nullptr, cs.vocab_start, cs.v, cs.b, cs.t, cs.c);

    const std::vector<double> wte_ref = to_double(wte);
    const std::vector<double> wpe_ref = to_double(wpe);
    std::vector<double> ref_out(static_cast<size_t>(n * cs.c));
    cpu::embedding_forward(ref_out.data(), tokens.data(), wte_ref.data(),
                           cs.with_wpe ? wpe_ref.data() : nullptr, cs.vocab_start, cs.v, cs.b, cs.t,
                           cs.c);
    STRATA_REQUIRE_CLOSE(TestType, "embedding out", download(d_out), ref_out);
  }
}

TEMPLATE_TEST_CASE(
    "embedding backward on the GPU adds what the float64 CPU reference adds to dwte and dwpe",
    "[gpu][embedding]", float, bf16) {
  // dwte[token - vocab_start] += each dout row of a token in the shard, dwpe[t] += the sum of
  // dout[b,t] over b (when given), as kernels/cpu/embedding.cpp. dwte and dwpe start from random
  // values, and what the kernel added (after - start) is compared with what the reference added
  // to zeros.
  Context ctx;
  uint64_t seed = 101;
  for (const EmbeddingCase& cs : kCases) {
    INFO(cs.describe());
    const int64_t n = cs.b * cs.t;
    const std::vector<int32_t> tokens = random_tokens(static_cast<size_t>(n), seed++, cs.vocab);
    const std::vector<float> dout = rounded<TestType>(random_floats(n * cs.c, seed++));
    const std::vector<float> dwte_start = random_floats(cs.v * cs.c, seed++);
    const std::vector<float> dwpe_start = random_floats(cs.t * cs.c, seed++);
    const DeviceBuffer<int32_t> d_tokens = upload_tokens(tokens);
    const DeviceBuffer<TestType> d_dout = upload<TestType>(dout);
    DeviceBuffer<float> d_dwte = upload<float>(dwte_start);
    DeviceBuffer<float> d_dwpe = upload<float>(dwpe_start);

    embedding_backward(ctx, d_dwte.data(), cs.with_wpe ? d_dwpe.data() : nullptr, d_dout.data(),
                       d_tokens.data(), cs.vocab_start, cs.v, cs.b, cs.t, cs.c);

    const std::vector<double> dout_ref = to_double(dout);
    std::vector<double> ref_dwte(static_cast<size_t>(cs.v * cs.c), 0.0);
    std::vector<double> ref_dwpe(static_cast<size_t>(cs.t * cs.c), 0.0);
    cpu::embedding_backward(ref_dwte.data(), cs.with_wpe ? ref_dwpe.data() : nullptr,
                            dout_ref.data(), tokens.data(), cs.vocab_start, cs.v, cs.b, cs.t, cs.c);
    STRATA_REQUIRE_CLOSE(TestType, "dwte increment", increment(download(d_dwte), dwte_start),
                         ref_dwte);
    if (cs.with_wpe) {
      STRATA_REQUIRE_CLOSE(TestType, "dwpe increment", increment(download(d_dwpe), dwpe_start),
                           ref_dwpe);
    }
  }
}

TEMPLATE_TEST_CASE("embedding backward on the GPU gives the same bits run after run",
                   "[gpu][embedding]", float, bf16) {
  // The backward sums in a fixed order (a stable sort, one thread per channel and run, no
  // atomics), so two runs from the same start give identical dwte and dwpe, byte for byte:
  // with long runs (a vocabulary of 3) and with many short ones (a shard of 1000 of 2000).
  Context ctx;
  const std::vector<EmbeddingCase> cases = {{3, 0, 3, 8, 256, 768, true},
                                            {2000, 500, 1000, 8, 256, 768, true}};
  for (const EmbeddingCase& cs : cases) {
    INFO(cs.describe());
    const int64_t n = cs.b * cs.t;
    const std::vector<int32_t> tokens = random_tokens(static_cast<size_t>(n), 7, cs.vocab);
    const std::vector<float> dout = rounded<TestType>(random_floats(n * cs.c, 8));
    const std::vector<float> dwte_start = random_floats(cs.v * cs.c, 9);
    const std::vector<float> dwpe_start = random_floats(cs.t * cs.c, 10);
    const DeviceBuffer<int32_t> d_tokens = upload_tokens(tokens);
    const DeviceBuffer<TestType> d_dout = upload<TestType>(dout);

    std::vector<float> dwte[2];
    std::vector<float> dwpe[2];
    for (int run = 0; run < 2; ++run) {
      DeviceBuffer<float> d_dwte = upload<float>(dwte_start);
      DeviceBuffer<float> d_dwpe = upload<float>(dwpe_start);
      embedding_backward(ctx, d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(),
                         cs.vocab_start, cs.v, cs.b, cs.t, cs.c);
      dwte[run] = download(d_dwte);
      dwpe[run] = download(d_dwpe);
    }
    // The runs changed dwte (so that equal bits mean something), and agree bit for bit.
    CHECK(dwte[0] != dwte_start);
    CHECK(std::memcmp(dwte[0].data(), dwte[1].data(), dwte[0].size() * sizeof(float)) == 0);
    CHECK(std::memcmp(dwpe[0].data(), dwpe[1].data(), dwpe[0].size() * sizeof(float)) == 0);
  }
}

}  // namespace
}  // namespace strata::cuda
