// The host side of the backend's storage types: conversion between fp32 and bf16 on host
// memory, and tensors filled from and read back as floats.

#include "exec/backend.hpp"

#include <cstring>

#include <fmt/format.h>

namespace strata {

void convert_on_host(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  if (n <= 0) return;
  if (dst_dtype == src_dtype) {
    std::memmove(dst, src, static_cast<size_t>(n * bytes_per_element(dst_dtype)));
    return;
  }
  const auto count = static_cast<size_t>(n);
  if (dst_dtype == DType::kBf16 && src_dtype == DType::kFp32) {
    const auto* in = static_cast<const float*>(src);
    auto* out = static_cast<Bf16*>(dst);
    for (size_t i = 0; i < count; ++i) out[i] = Bf16::from_float(in[i]);
    return;
  }
  STRATA_ASSERT(
      dst_dtype == DType::kFp32 && src_dtype == DType::kBf16,
      fmt::format("no conversion from {} to {}", to_string(src_dtype), to_string(dst_dtype)));
  const auto* in = static_cast<const Bf16*>(src);
  auto* out = static_cast<float*>(dst);
  for (size_t i = 0; i < count; ++i) out[i] = in[i].to_float();
}

void upload_values(Backend& backend, const DeviceTensor& tensor, std::span<const float> values) {
  const auto n = static_cast<int64_t>(values.size());
  STRATA_ASSERT(n <= tensor.size(), "the values fit the tensor");
  if (tensor.dtype() == DType::kFp32) {
    backend.upload(tensor.data<float>(), values);
    return;
  }
  std::vector<Bf16> rounded(values.size());
  convert_on_host(rounded.data(), DType::kBf16, values.data(), DType::kFp32, n);
  backend.upload(tensor.data<Bf16>(), std::span<const Bf16>(rounded));
}

std::vector<float> download_values(Backend& backend, const DeviceTensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.size()));
  if (tensor.dtype() == DType::kFp32) {
    backend.download(std::span(values), tensor.data<float>());
    return values;
  }
  std::vector<Bf16> raw(values.size());
  backend.download(std::span(raw), tensor.data<Bf16>());
  convert_on_host(values.data(), DType::kFp32, raw.data(), DType::kBf16, tensor.size());
  return values;
}

}  // namespace strata
