#pragma once
// Independent jobs over the cores: body(i) for every i in [0, count), each on one of up to
// `threads` threads (the caller's among them), taken in increasing order. Each body writes only
// its own results, so the outcome does not depend on the thread count. An exception thrown by a
// body is rethrown once every thread has finished (the lowest index's, so that it is the same
// whatever the timing).

#include <cstddef>
#include <functional>

namespace strata {

void parallel_for(size_t count, size_t threads, const std::function<void(size_t)>& body);

}  // namespace strata
