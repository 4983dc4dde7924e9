#include "exec/param_store.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

ParamStore::ParamStore(Backend& backend, const std::vector<ParamBlock>& blocks,
                       const StoreLayout& layout, uint64_t seed)
    : backend_(backend),
      zero_(layout.dp > 1 ? layout.zero_stage : 0),
      dp_(layout.dp),
      param_dtype_(layout.param_dtype),
      reduce_dtype_(layout.reduce_dtype),
      separate_master_(layout.param_dtype != DType::kFp32) {
  const auto fp32 = [&](int64_t elements) { return DeviceTensor(backend, elements, DType::kFp32); };
  for (const ParamBlock& block : blocks) {
    BlockState state{block.kind, block.layer, {}};
    for (const ParamSpec& spec : block.params) {
      ParamState p;
      p.spec = spec;
      p.size = spec.shard_size(layout.tp);
      p.chunk = (p.size + dp_ - 1) / dp_;
      const std::vector<float> values = initial_shard(spec, seed, layout.tp_rank, layout.tp);
      p.grad = fp32(p.size);
      if (zero_ < 3) {
        p.param = DeviceTensor(backend, p.size, param_dtype_);
        upload_values(backend, p.param, values);
      }
      if (zero_ == 0) {
        if (separate_master_) {
          p.master = fp32(p.size);
          upload_values(backend, p.master, values);
        }
        p.m = fp32(p.size);
        p.v = fp32(p.size);
      } else {
        const int64_t first = layout.dp_rank * p.chunk;
        const int64_t count = std::max<int64_t>(0, std::min(p.chunk, p.size - first));
        const std::span<const float> chunk =
            std::span(values).subspan(static_cast<size_t>(first), static_cast<size_t>(count));
        p.master = fp32(p.chunk);
        upload_values(backend, p.master, chunk);
        if (separate_master_) {
          p.owned = DeviceTensor(backend, p.chunk, param_dtype_);
          upload_values(backend, p.owned, chunk);
        }
        p.chunk_grad = fp32(p.chunk);
        p.m = fp32(p.chunk);
        p.v = fp32(p.chunk);
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

DeviceTensor& ParamStore::staging(DeviceTensor& buffer, DType dtype, int64_t elements) {
  if (buffer.dtype() != dtype || buffer.size() < elements)
    buffer = DeviceTensor(backend_, elements, dtype);
  return buffer;
}

namespace {

// Elements of chunk `member` of a tensor that exist (the last chunk may be short or empty).
int64_t chunk_extent(const ParamState& p, int64_t member) {
  return std::max<int64_t>(0, std::min(p.chunk, p.size - member * p.chunk));
}

// The collectives on the first `n` elements of staging buffers, in the buffers' dtype.
void all_reduce(Communicator& comm, const DeviceTensor& buffer, int64_t n, RankGroup group) {
  with_storage_type(buffer.dtype(), [&]<typename T>(T) {
    comm.all_reduce(std::span(buffer.data<T>(), static_cast<size_t>(n)), group, ReduceOp::kSum);
  });
}

void reduce_scatter(Communicator& comm, const DeviceTensor& send, const DeviceTensor& recv,
                    int64_t per_member, int64_t members, RankGroup group) {
  with_storage_type(send.dtype(), [&]<typename T>(T) {
    comm.reduce_scatter(
        std::span<const T>(send.data<T>(), static_cast<size_t>(per_member * members)),
        std::span(recv.data<T>(), static_cast<size_t>(per_member)), group);
  });
}

void all_gather(Communicator& comm, const DeviceTensor& send, const DeviceTensor& recv,
                int64_t per_member, int64_t members, RankGroup group) {
  with_storage_type(send.dtype(), [&]<typename T>(T) {
    comm.all_gather(std::span<const T>(send.data<T>(), static_cast<size_t>(per_member)),
                    std::span(recv.data<T>(), static_cast<size_t>(per_member * members)), group);
  });
}

}  // namespace

void ParamStore::reduce_gradients(std::span<const GradientSource> sources, Communicator& comm,
                                  RankGroup dp_group) {
  constexpr DType kFp32 = DType::kFp32;
  if (zero_ == 0) {
    int64_t total = 0;
    for (const GradientSource& g : sources) total += g.param->size;
    const DeviceTensor& buffer = staging(send_, reduce_dtype_, total);
    int64_t offset = 0;
    for (const GradientSource& g : sources) {
      backend_.convert(buffer.address(offset), reduce_dtype_, g.grad, kFp32, g.param->size);
      offset += g.param->size;
    }
    all_reduce(comm, buffer, total, dp_group);
    offset = 0;
    for (const GradientSource& g : sources) {
      backend_.convert(g.grad, kFp32, buffer.address(offset), reduce_dtype_, g.param->size);
      offset += g.param->size;
    }
    return;
  }
  int64_t per_member = 0;
  for (const GradientSource& g : sources) per_member += g.param->chunk;
  const DeviceTensor& send = staging(send_, reduce_dtype_, per_member * dp_);
  const DeviceTensor& recv = staging(recv_, reduce_dtype_, per_member);
  backend_.fill_zero_bytes(send.address(), per_member * dp_ * bytes_per_element(reduce_dtype_));
  int64_t offset = 0;
  for (int64_t member = 0; member < dp_; ++member) {
    for (const GradientSource& g : sources) {
      const int64_t extent = chunk_extent(*g.param, member);
      if (extent > 0) {
        backend_.convert(send.address(offset), reduce_dtype_, g.grad + member * g.param->chunk,
                         kFp32, extent);
      }
      offset += g.param->chunk;
    }
  }
  reduce_scatter(comm, send, recv, per_member, dp_, dp_group);
  const DeviceTensor* reduced = &recv;
  if (reduce_dtype_ != kFp32) {
    reduced = &staging(widened_, kFp32, per_member);
    backend_.convert(reduced->address(), kFp32, recv.address(), reduce_dtype_, per_member);
  }
  offset = 0;
  for (const GradientSource& g : sources) {
    backend_.fp32().accumulate(g.param->chunk_grad.data<float>(), reduced->data<float>() + offset,
                               g.param->chunk);
    offset += g.param->chunk;
    // ZeRO 2 and 3 reduce each micro-batch's gradient, which starts the next step at zero.
    if (zero_ >= 2) backend_.fill_zero(g.grad, g.param->size);
  }
}

void ParamStore::all_reduce_gradient(ParamState& p, Communicator& comm, RankGroup group) {
  float* grad = reduced_grad(p);
  const int64_t n = reduced_size(p);
  if (reduce_dtype_ == DType::kFp32) {
    comm.all_reduce(std::span(grad, static_cast<size_t>(n)), group, ReduceOp::kSum);
    return;
  }
  const DeviceTensor& buffer = staging(send_, reduce_dtype_, n);
  backend_.convert(buffer.address(), reduce_dtype_, grad, DType::kFp32, n);
  all_reduce(comm, buffer, n, group);
  backend_.convert(grad, DType::kFp32, buffer.address(), reduce_dtype_, n);
}

void ParamStore::gather_params(std::span<ParamState* const> params, Communicator& comm,
                               RankGroup dp_group) {
  STRATA_ASSERT(zero_ >= 1, "parameters are gathered under ZeRO 1-3 only");
  const int64_t element = bytes_per_element(param_dtype_);
  int64_t per_member = 0;
  for (const ParamState* p : params) per_member += p->chunk;
  const DeviceTensor& send = staging(send_, param_dtype_, per_member);
  const DeviceTensor& recv = staging(recv_, param_dtype_, per_member * dp_);
  int64_t offset = 0;
  for (ParamState* p : params) {
    backend_.copy_bytes(send.address(offset), owned_params(*p).address(), p->chunk * element);
    offset += p->chunk;
  }
  all_gather(comm, send, recv, per_member, dp_, dp_group);
  offset = 0;
  for (int64_t member = 0; member < dp_; ++member) {
    for (ParamState* p : params) {
      STRATA_ASSERT(p->param.allocated(),
                    fmt::format("{} is gathered into memory allocated for it", p->spec.name));
      const int64_t extent = chunk_extent(*p, member);
      if (extent > 0) {
        backend_.copy_bytes(p->param.address(member * p->chunk), recv.address(offset),
                            extent * element);
      }
      offset += p->chunk;
    }
  }
}

void ParamStore::add_gradient_sum_of_squares(ParamState& p, double* total) {
  if (p.spec.counts_in_norm)
    backend_.fp32().sum_of_squares(total, reduced_grad(p), reduced_size(p));
}

void ParamStore::add_gradient_sum_of_squares(double* total) {
  for (BlockState& block : blocks_) {
    for (ParamState& p : block.params) add_gradient_sum_of_squares(p, total);
  }
}

void ParamStore::step(const cpu::AdamWConfig& config, int64_t step, const double* norm_squared,
                      double max_norm) {
  for (BlockState& block : blocks_) {
    for (ParamState& p : block.params) {
      cpu::AdamWConfig tensor_config = config;
      if (!p.spec.weight_decay) tensor_config.weight_decay = 0;
      // The params AdamW writes (rounded from the masters where those are apart).
      DeviceTensor& param = zero_ == 0 ? p.param : owned_params(p);
      float* master = separate_master_ ? p.master.data<float>() : nullptr;
      with_storage_type(param_dtype_, [&]<typename T>(T) {
        backend_.kernels<T>().adamw_update(param.data<T>(), master, reduced_grad(p),
                                           p.m.data<float>(), p.v.data<float>(), reduced_size(p),
                                           tensor_config, step, norm_squared, max_norm);
      });
      backend_.fill_zero(p.grad.data<float>(), p.size);
      if (zero_ >= 1) backend_.fill_zero(p.chunk_grad.data<float>(), p.chunk);
    }
  }
}

std::vector<CheckpointTensor> ParamStore::save() const {
  std::vector<CheckpointTensor> tensors;
  const auto add = [&](const std::string& name, const DeviceTensor& t) {
    tensors.push_back({name, download_values(backend_, t)});
  };
  for (const BlockState& block : blocks_) {
    for (const ParamState& p : block.params) {
      const std::string& name = p.spec.name;
      if (zero_ < 3) add(name + ".param", whole_values(p));
      if (zero_ >= 1) add(name + ".master", p.master);
      add(name + ".adam_m", p.m);
      add(name + ".adam_v", p.v);
    }
  }
  return tensors;
}

void ParamStore::load(const std::vector<CheckpointTensor>& tensors, const std::string& file) {
  size_t next = 0;
  // Loads the next tensor, which must be `name` with into's size, into `into`, and into
  // `rounded` (the params in param_dtype kept beside fp32 masters) where given.
  const auto take = [&](const std::string& name, DeviceTensor& into, DeviceTensor* rounded) {
    if (next >= tensors.size() || tensors[next].name != name ||
        static_cast<int64_t>(tensors[next].values.size()) != into.size()) {
      throw InputError(file, "--resume",
                       fmt::format("does not hold '{}' with {} values where this run expects it",
                                   name, into.size()),
                       "resume with the model and plan the checkpoint was written with");
    }
    upload_values(backend_, into, tensors[next].values);
    if (rounded != nullptr) upload_values(backend_, *rounded, tensors[next].values);
    ++next;
  };
  for (BlockState& block : blocks_) {
    for (ParamState& p : block.params) {
      const std::string& name = p.spec.name;
      const bool apart = separate_master_;
      if (zero_ == 0) take(name + ".param", apart ? p.master : p.param, apart ? &p.param : nullptr);
      if (zero_ == 1 || zero_ == 2) take(name + ".param", p.param, nullptr);
      if (zero_ >= 1) take(name + ".master", p.master, apart ? &p.owned : nullptr);
      take(name + ".adam_m", p.m, nullptr);
      take(name + ".adam_v", p.v, nullptr);
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
      // Under ZeRO 3 the owned chunk: full params exist only inside a gather.
      tensors.push_back(
          {p.spec.name, download_values(backend_, zero_ == 3 ? p.master : whole_values(p))});
    }
  }
  return tensors;
}

}  // namespace strata
