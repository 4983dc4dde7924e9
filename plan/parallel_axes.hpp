#pragma once
// Parallel axes: the dimensions a training step is split along (docs/design.md, "Parallel axes"),
// named as Megatron-Core names them: tp (tensor), cp (context), ep (expert), dp (data) and pp
// (pipeline). A plan gives each a size, and the rank layout (plan/rank_layout.hpp) lays the ranks
// out over them in an order, innermost first: Megatron-Core's default "tp-cp-ep-dp-pp"
// (megatron/core/parallel_state.py, initialize_model_parallel's `order`), TP innermost so that TP
// peers share a node.
//
// Where the experts split over fewer TP ranks than the dense layers (expert tensor parallelism
// etp < tp), Megatron-Core lays the MoE layers' ranks out on a grid of their own, etp innermost,
// then ep: each TP group's tp / etp blocks of etp ranks belong to different expert-parallel ranks
// (parallel_state.py's expert RankGenerator). The tp axis then holds the expert-TP coordinate
// (size etp) and the axis tp-outer, always just outside it in the order, the rest (size tp / etp):
// the dense TP group spans both, the expert-TP group tp alone, the expert-parallel group tp-outer
// and ep. tp-outer has size 1 otherwise, and no name in a rank order or a report.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace strata {

enum class Axis : uint8_t { kTp, kCp, kEp, kDp, kPp, kTpOuter };
inline constexpr int kAxisCount = 6;
inline constexpr std::array<Axis, kAxisCount> kAllAxes = {Axis::kTp, Axis::kCp, Axis::kEp,
                                                          Axis::kDp, Axis::kPp, Axis::kTpOuter};
// The axes a rank order names and reports break communication down by: every axis but tp-outer,
// whose groups' communication is the dense or expert TP's.
inline constexpr std::array<Axis, 5> kNamedAxes = {Axis::kTp, Axis::kCp, Axis::kEp, Axis::kDp,
                                                   Axis::kPp};
// Megatron-Core's default rank order, innermost first.
inline constexpr std::array<Axis, kAxisCount> kMegatronOrder = {
    Axis::kTp, Axis::kTpOuter, Axis::kCp, Axis::kEp, Axis::kDp, Axis::kPp};

// A set of axes, one bit per Axis.
using AxisMask = uint8_t;
constexpr AxisMask axis_bit(Axis axis) {
  return static_cast<AxisMask>(1u << static_cast<int>(axis));
}
constexpr AxisMask axes_mask(std::initializer_list<Axis> axes) {
  AxisMask mask = 0;
  for (const Axis axis : axes) mask |= axis_bit(axis);
  return mask;
}
constexpr bool has_axis(AxisMask mask, Axis axis) { return (mask & axis_bit(axis)) != 0; }
inline constexpr AxisMask kEveryAxis =
    axes_mask({Axis::kTp, Axis::kCp, Axis::kEp, Axis::kDp, Axis::kPp, Axis::kTpOuter});
// Every axis but pp: the ranks one rank of a folded graph stands for.
inline constexpr AxisMask kReplicaAxes = static_cast<AxisMask>(kEveryAxis & ~axis_bit(Axis::kPp));

const char* to_string(Axis axis);
std::optional<Axis> parse_axis(std::string_view name);

// The member of `fields` (a struct with members tp, cp, ep, dp and pp: a rank's coordinates,
// communication seconds) along `axis`; tp-outer's is its own member where `fields` has one
// (coordinates), else tp's (communication).
template <typename Fields>
auto& along(Fields& fields, Axis axis) {
  switch (axis) {
    case Axis::kTpOuter:
      if constexpr (requires { fields.tp_outer; }) {
        return fields.tp_outer;
      } else {
        return fields.tp;
      }
    case Axis::kTp:
      return fields.tp;
    case Axis::kCp:
      return fields.cp;
    case Axis::kEp:
      return fields.ep;
    case Axis::kDp:
      return fields.dp;
    case Axis::kPp:
      break;
  }
  return fields.pp;
}

// A value per axis (sizes, coordinates), indexed by Axis.
using PerAxis = std::array<int64_t, kAxisCount>;
inline int64_t& at(PerAxis& values, Axis axis) { return values[static_cast<size_t>(axis)]; }
inline int64_t at(const PerAxis& values, Axis axis) { return values[static_cast<size_t>(axis)]; }

// The axes of a plan: a size each, and the order ranks are laid out in, innermost first.
struct ParallelAxes {
  PerAxis sizes = {1, 1, 1, 1, 1, 1};
  std::array<Axis, kAxisCount> order = kMegatronOrder;

  int64_t size(Axis axis) const { return at(sizes, axis); }
  // The ranks of the plan: the product of the sizes.
  int64_t world_size() const;
  // The product of the sizes of `axes`.
  int64_t product(AxisMask axes) const;
  // The coordinates of `rank` along each axis (plan/rank_layout.hpp has the numbering).
  PerAxis coords(int64_t rank) const;
  // Tensor parallelism of the dense layers: tp x tp-outer.
  int64_t tp() const { return size(Axis::kTp) * size(Axis::kTpOuter); }
  // "tp-cp-ep-dp-pp" (tp-outer unnamed).
  std::string order_text() const;

  bool operator==(const ParallelAxes&) const = default;
};

// Parses a rank order, innermost first, as "tp-cp-ep-dp-pp" or "dp-tp-pp": each named axis at
// most once; axes left out follow the listed ones in Megatron-Core's order, and tp-outer follows
// tp. Throws InputError naming `where` and `field` on an unknown or repeated axis.
std::array<Axis, kAxisCount> parse_rank_order(std::string_view text, const std::string& where,
                                              const std::string& field);

}  // namespace strata
