#include "plan/parallel_axes.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

const char* to_string(Axis axis) {
  switch (axis) {
    case Axis::kTp:
      return "tp";
    case Axis::kCp:
      return "cp";
    case Axis::kEp:
      return "ep";
    case Axis::kDp:
      return "dp";
    case Axis::kPp:
      return "pp";
    case Axis::kTpOuter:
      return "tp-outer";
  }
  return "?";
}

std::optional<Axis> parse_axis(std::string_view name) {
  for (const Axis axis : kNamedAxes) {
    if (name == to_string(axis)) return axis;
  }
  return std::nullopt;
}

int64_t ParallelAxes::world_size() const { return product(kEveryAxis); }

int64_t ParallelAxes::product(AxisMask axes) const {
  int64_t product = 1;
  for (const Axis axis : kAllAxes) {
    if (has_axis(axes, axis)) product *= size(axis);
  }
  return product;
}

PerAxis ParallelAxes::coords(int64_t rank) const {
  PerAxis coords{};
  for (const Axis axis : order) {
    at(coords, axis) = rank % size(axis);
    rank /= size(axis);
  }
  return coords;
}

std::string ParallelAxes::order_text() const {
  std::vector<const char*> names;
  for (const Axis axis : order) {
    if (axis != Axis::kTpOuter) names.push_back(to_string(axis));
  }
  return fmt::format("{}", fmt::join(names, "-"));
}

std::array<Axis, kAxisCount> parse_rank_order(std::string_view text, const std::string& where,
                                              const std::string& field) {
  const std::string fix =
      "list axes among tp, cp, ep, dp, pp, innermost first, each once, "
      "joined by '-' (e.g. tp-cp-ep-dp-pp)";
  std::vector<Axis> listed;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find('-', begin), text.size());
    const std::string_view name = text.substr(begin, end - begin);
    const std::optional<Axis> axis = parse_axis(name);
    if (!axis) {
      throw InputError(where, field,
                       fmt::format("'{}' in '{}' is not an axis", std::string(name), text), fix);
    }
    if (std::find(listed.begin(), listed.end(), *axis) != listed.end()) {
      throw InputError(where, field, fmt::format("'{}' lists {} twice", text, std::string(name)),
                       fix);
    }
    listed.push_back(*axis);
    begin = end + 1;
  }
  for (const Axis axis : kNamedAxes) {
    if (std::find(listed.begin(), listed.end(), axis) == listed.end()) listed.push_back(axis);
  }
  listed.insert(std::find(listed.begin(), listed.end(), Axis::kTp) + 1, Axis::kTpOuter);
  std::array<Axis, kAxisCount> order{};
  std::copy(listed.begin(), listed.end(), order.begin());
  return order;
}

}  // namespace strata
