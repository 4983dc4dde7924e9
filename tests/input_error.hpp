#pragma once
// Runs an action that should refuse its input and returns the InputError it threw (nullopt when
// it threw none), so a test can check the field and the message.

#include <optional>

#include "common/error.hpp"

namespace strata::test {

template <typename Action>
std::optional<InputError> input_error_of(Action action) {
  try {
    action();
  } catch (const InputError& error) {
    return error;
  }
  return std::nullopt;
}

}  // namespace strata::test
