// common/append_array.hpp, which holds a task graph's dependency and tensor-use lists: runs
// appended with extend() keep their values through every growth and copy, truncate() drops a
// run's unstored tail, and reserve() makes room without adding values. The facts are the
// container's contract, checked against a std::vector filled with the same values.

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "common/append_array.hpp"

namespace strata {
namespace {

TEST_CASE("runs appended to an AppendArray keep their values as it grows", "[append_array]") {
  AppendArray<int32_t> array;
  std::vector<int32_t> expected;
  // Runs of 0 to 6 values, 1,000 of them: the array grows from empty many times over.
  for (int32_t run = 0; run < 1000; ++run) {
    const size_t count = static_cast<size_t>(run % 7);
    int32_t* out = array.extend(count);
    for (size_t i = 0; i < count; ++i) {
      out[i] = run * 10 + static_cast<int32_t>(i);
      expected.push_back(out[i]);
    }
  }
  REQUIRE(array.size() == expected.size());
  CHECK(array.capacity() >= array.size());
  CHECK(std::vector<int32_t>(array.data(), array.data() + array.size()) == expected);

  const AppendArray<int32_t> copy = array;
  CHECK(std::vector<int32_t>(copy.data(), copy.data() + copy.size()) == expected);
}

TEST_CASE("truncate drops the unstored tail of a run, and reserve adds no values",
          "[append_array]") {
  AppendArray<int32_t> array;
  array.reserve(100);
  CHECK(array.size() == 0);
  CHECK(array.capacity() == 100);
  // Room for four, two stored (a task's dependencies, some of them dropped).
  int32_t* out = array.extend(4);
  out[0] = 7;
  out[1] = 9;
  array.truncate(2);
  out = array.extend(1);
  out[0] = 11;
  CHECK(std::vector<int32_t>(array.data(), array.data() + array.size()) ==
        std::vector<int32_t>{7, 9, 11});
  CHECK(array.capacity() == 100);  // within what reserve made room for: no growth
}

}  // namespace
}  // namespace strata
