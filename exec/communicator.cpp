#include "exec/communicator.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace strata {

void check_reduce_scatter_sizes(int32_t rank, size_t send, size_t recv, RankGroup group) {
  STRATA_ASSERT(send == group.size() * recv,
                fmt::format("reduce_scatter on rank {}: send has {} elements, not group size {} x "
                            "recv {}",
                            rank, send, group.size(), recv));
}

void check_all_gather_sizes(int32_t rank, size_t send, size_t recv, RankGroup group) {
  STRATA_ASSERT(recv == group.size() * send,
                fmt::format("all_gather on rank {}: recv has {} elements, not group size {} x "
                            "send {}",
                            rank, recv, group.size(), send));
}

}  // namespace strata
