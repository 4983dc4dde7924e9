#include "exec/param_store.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

ParamStore::ParamStore(Backend& backend, const std::vector<ParamBlock>& blocks, int64_t zero_stage,
                       int64_t dp, int64_t dp_rank, int64_t tp, int64_t tp_rank, uint64_t seed)
    : backend_(backend), zero_(dp > 1 ? zero_stage : 0), dp_(dp) {
  for (const ParamBlock& block : blocks) {
    BlockState state{block.kind, block.layer, {}};
    for (const ParamSpec& spec : block.params) {
      ParamState p;
      p.spec = spec;
      p.size = spec.shard_size(tp);
      p.chunk = (p.size + dp - 1) / dp;
      const std::vector<float> values = initial_shard(spec, seed, tp_rank, tp);
      p.grad = DeviceTensor(backend, p.size, DType::kFp32);
      if (zero_ == 0) {
        p.param = DeviceTensor(backend, p.size, DType::kFp32);
        backend.upload(p.param.data<float>(), values);
        p.m = DeviceTensor(backend, p.size, DType::kFp32);
        p.v = DeviceTensor(backend, p.size, DType::kFp32);
      } else {
        if (zero_ < 3) {
          p.param = DeviceTensor(backend, p.size, DType::kFp32);
          backend.upload(p.param.data<float>(), values);
        }
        p.master = DeviceTensor(backend, p.chunk, DType::kFp32);
        const int64_t first = dp_rank * p.chunk;
        const int64_t count = std::max<int64_t>(0, std::min(p.chunk, p.size - first));
        if (count > 0) {
          backend.upload(
              p.master.data<float>(),
              std::span(values).subspan(static_cast<size_t>(first), static_cast<size_t>(count)));
        }
        p.chunk_grad = DeviceTensor(backend, p.chunk, DType::kFp32);
        p.m = DeviceTensor(backend, p.chunk, DType::kFp32);
        p.v = DeviceTensor(backend, p.chunk, DType::kFp32);
      }
      state.params.push_back(std::move(p));
    }
    blocks_.push_back(std::move(state));
  }
}

BlockState& ParamStore::layer(int64_t layer) {
  for (BlockState& block : blocks_) {
    if (block.kind == BlockKind::kLayer && block.layer == layer) return block;
  }
  STRATA_ASSERT(false, fmt::format("this rank holds no layer {}", layer));
  return blocks_.front();
}

BlockState* ParamStore::find(BlockKind kind) {
  for (BlockState& block : blocks_) {
    if (block.kind == kind) return &block;
  }
  return nullptr;
}

float* ParamStore::staging(DeviceTensor& buffer, int64_t elements) {
  if (buffer.size() < elements) buffer = DeviceTensor(backend_, elements, DType::kFp32);
  return buffer.data<float>();
}

namespace {

// Elements of chunk `member` of a tensor that exist (the last chunk may be short or empty).
int64_t chunk_extent(const ParamState& p, int64_t member) {
  return std::max<int64_t>(0, std::min(p.chunk, p.size - member * p.chunk));
}

}  // namespace

void ParamStore::reduce_gradients(std::span<const GradientSource> sources, Communicator& comm,
                                  RankGroup dp_group) {
  if (zero_ == 0) {
    int64_t total = 0;
    for (const GradientSource& g : sources) total += g.param->size;
    float* buffer = staging(send_, total);
    int64_t offset = 0;
    for (const GradientSource& g : sources) {
      backend_.copy(buffer + offset, g.grad, g.param->size);
      offset += g.param->size;
    }
    comm.all_reduce(std::span(buffer, static_cast<size_t>(total)), dp_group, ReduceOp::kSum);
    offset = 0;
    for (const GradientSource& g : sources) {
      backend_.copy(g.grad, buffer + offset, g.param->size);
      offset += g.param->size;
    }
    return;
  }
  int64_t per_member = 0;
  for (const GradientSource& g : sources) per_member += g.param->chunk;
  float* send = staging(send_, per_member * dp_);
  float* recv = staging(recv_, per_member);
  backend_.fill_zero(send, per_member * dp_);
  int64_t offset = 0;
  for (int64_t member = 0; member < dp_; ++member) {
    for (const GradientSource& g : sources) {
      const int64_t extent = chunk_extent(*g.param, member);
      if (extent > 0) backend_.copy(send + offset, g.grad + member * g.param->chunk, extent);
      offset += g.param->chunk;
    }
  }
  comm.reduce_scatter(std::span<const float>(send, static_cast<size_t>(per_member * dp_)),
                      std::span(recv, static_cast<size_t>(per_member)), dp_group);
  offset = 0;
  for (const GradientSource& g : sources) {
    backend_.fp32().accumulate(g.param->chunk_grad.data<float>(), recv + offset, g.param->chunk);
    offset += g.param->chunk;
    // ZeRO 2 and 3 reduce each micro-batch's gradient, which starts the next step at zero.
    if (zero_ >= 2) backend_.fill_zero(g.grad, g.param->size);
  }
}

void ParamStore::gather_params(std::span<ParamState* const> params, Communicator& comm,
                               RankGroup dp_group) {
  STRATA_ASSERT(zero_ >= 1, "parameters are gathered under ZeRO 1-3 only");
  int64_t per_member = 0;
  for (const ParamState* p : params) per_member += p->chunk;
  float* send = staging(send_, per_member);
  float* recv = staging(recv_, per_member * dp_);
  int64_t offset = 0;
  for (const ParamState* p : params) {
    backend_.copy(send + offset, p->master.data<float>(), p->chunk);
    offset += p->chunk;
  }
  comm.all_gather(std::span<const float>(send, static_cast<size_t>(per_member)),
                  std::span(recv, static_cast<size_t>(per_member * dp_)), dp_group);
  offset = 0;
  for (int64_t member = 0; member < dp_; ++member) {
    for (ParamState* p : params) {
      STRATA_ASSERT(p->param.allocated(),
                    fmt::format("{} is gathered into memory allocated for it", p->spec.name));
      const int64_t extent = chunk_extent(*p, member);
      if (extent > 0)
        backend_.copy(p->param.data<float>() + member * p->chunk, recv + offset, extent);
      offset += p->chunk;
    }
  }
}

double ParamStore::gradient_sum_of_squares(ParamState& p) {
  return p.spec.counts_in_norm ? backend_.fp32().sum_of_squares(reduced_grad(p), reduced_size(p))
                               : 0.0;
}

double ParamStore::gradient_sum_of_squares() {
  double sum = 0;
  for (BlockState& block : blocks_) {
    for (ParamState& p : block.params) sum += gradient_sum_of_squares(p);
  }
  return sum;
}

void ParamStore::step(const cpu::AdamWConfig& config, int64_t step, double grad_scale) {
  for (BlockState& block : blocks_) {
    for (ParamState& p : block.params) {
      cpu::AdamWConfig tensor_config = config;
      if (!p.spec.weight_decay) tensor_config.weight_decay = 0;
      float* param = zero_ == 0 ? p.param.data<float>() : p.master.data<float>();
      backend_.fp32().adamw_update(param, nullptr, reduced_grad(p), p.m.data<float>(),
                                   p.v.data<float>(), reduced_size(p), tensor_config, step,
                                   grad_scale);
      backend_.fill_zero(p.grad.data<float>(), p.size);
      if (zero_ >= 1) backend_.fill_zero(p.chunk_grad.data<float>(), p.chunk);
    }
  }
}

namespace {

CheckpointTensor download(Backend& backend, const std::string& name, const DeviceTensor& t) {
  CheckpointTensor out{name, std::vector<float>(static_cast<size_t>(t.size()))};
  backend.download(std::span(out.values), t.data<float>());
  return out;
}

}  // namespace

std::vector<CheckpointTensor> ParamStore::save() const {
  std::vector<CheckpointTensor> tensors;
  for (const BlockState& block : blocks_) {
    for (const ParamState& p : block.params) {
      const std::string& name = p.spec.name;
      if (zero_ < 3) tensors.push_back(download(backend_, name + ".param", p.param));
      if (zero_ >= 1) tensors.push_back(download(backend_, name + ".master", p.master));
      tensors.push_back(download(backend_, name + ".adam_m", p.m));
      tensors.push_back(download(backend_, name + ".adam_v", p.v));
    }
  }
  return tensors;
}

void ParamStore::load(const std::vector<CheckpointTensor>& tensors, const std::string& file) {
  size_t next = 0;
  const auto take = [&](const std::string& name, DeviceTensor& into) {
    if (next >= tensors.size() || tensors[next].name != name ||
        static_cast<int64_t>(tensors[next].values.size()) != into.size()) {
      throw InputError(file, "--resume",
                       fmt::format("does not hold '{}' with {} values where this run expects it",
                                   name, into.size()),
                       "resume with the model and plan the checkpoint was written with");
    }
    backend_.upload(into.data<float>(), tensors[next].values);
    ++next;
  };
  for (BlockState& block : blocks_) {
    for (ParamState& p : block.params) {
      const std::string& name = p.spec.name;
      if (zero_ < 3) take(name + ".param", p.param);
      if (zero_ >= 1) take(name + ".master", p.master);
      take(name + ".adam_m", p.m);
      take(name + ".adam_v", p.v);
    }
  }
  if (next != tensors.size()) {
    throw InputError(file, "--resume",
                     fmt::format("holds {} tensors; this run expects {}", tensors.size(), next),
                     "resume with the model and plan the checkpoint was written with");
  }
}

std::vector<CheckpointTensor> ParamStore::full_params() const {
  std::vector<CheckpointTensor> tensors;
  for (const BlockState& block : blocks_) {
    for (const ParamState& p : block.params) {
      if (zero_ == 3) {
        // The owned chunk: full params exist only inside a gather.
        tensors.push_back(download(backend_, p.spec.name, p.master));
      } else {
        tensors.push_back(download(backend_, p.spec.name, p.param));
      }
    }
  }
  return tensors;
}

}  // namespace strata
