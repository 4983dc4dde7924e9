#include "cli/search_workers.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/error.hpp"
#include "sim/search_json.hpp"

#if STRATA_HAVE_MPI
#include <mpi.h>

// Every MPI call goes through this check: a failure names the call, file and line, then aborts
// every rank (an MPI failure mid-search is not a user's mistake to recover from).
#define STRATA_MPI_CHECK(call)                                                            \
  do {                                                                                    \
    const int mpi_status = (call);                                                        \
    if (mpi_status != MPI_SUCCESS) {                                                      \
      char mpi_text[MPI_MAX_ERROR_STRING];                                                \
      int mpi_length = 0;                                                                 \
      MPI_Error_string(mpi_status, mpi_text, &mpi_length);                                \
      std::fprintf(stderr, "strata: %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, \
                   mpi_text);                                                             \
      MPI_Abort(MPI_COMM_WORLD, 3);                                                       \
    }                                                                                     \
  } while (false)
#endif

namespace strata::cli {

namespace {

// The environment mpirun (Open MPI) gives each process, or -1 outside mpirun.
int launcher_int(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? -1 : std::atoi(value);
}

}  // namespace

#if STRATA_HAVE_MPI
// Each rank simulates batch entries rank, rank + K, ...; the outcomes travel as JSON text.
class SearchWorkers::MpiEvaluator : public PlanEvaluator {
 public:
  MpiEvaluator(ThreadEvaluator& local, int rank, int ranks)
      : local_(local), rank_(rank), ranks_(ranks) {}

  std::vector<PlanOutcome> evaluate(std::span<const PlanOutcome> batch) override {
    std::vector<PlanOutcome> mine;
    for (size_t i = static_cast<size_t>(rank_); i < batch.size(); i += static_cast<size_t>(ranks_))
      mine.push_back(batch[i]);
    nlohmann::json sent = nlohmann::json::array();
    for (const PlanOutcome& outcome : local_.evaluate(mine)) sent.push_back(outcome_json(outcome));
    const std::string text = sent.dump();

    const auto size = static_cast<size_t>(ranks_);
    int length = static_cast<int>(text.size());
    std::vector<int> lengths(size);
    STRATA_MPI_CHECK(
        MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD));
    std::vector<int> offsets(size, 0);
    for (size_t r = 1; r < size; ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
    std::string received(static_cast<size_t>(offsets.back() + lengths.back()), '\0');
    STRATA_MPI_CHECK(MPI_Allgatherv(text.data(), length, MPI_CHAR, received.data(), lengths.data(),
                                    offsets.data(), MPI_CHAR, MPI_COMM_WORLD));

    std::vector<PlanOutcome> outcomes(batch.size());
    for (size_t r = 0; r < size; ++r) {
      const nlohmann::json part = nlohmann::json::parse(
          received.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r])));
      for (size_t j = 0; j < part.size(); ++j) outcomes[r + j * size] = outcome_from_json(part[j]);
    }
    return outcomes;
  }

 private:
  ThreadEvaluator& local_;
  int rank_;
  int ranks_;
};
#endif

SearchWorkers::SearchWorkers(const SearchSpace& space, const SearchOptions& options)
    : options_(options) {
  const int launched_ranks = launcher_int("OMPI_COMM_WORLD_SIZE");
#if STRATA_HAVE_MPI
  if (launched_ranks >= 1) {
    STRATA_MPI_CHECK(MPI_Init(nullptr, nullptr));
    mpi_initialized_ = true;
    STRATA_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    STRATA_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &ranks_));
  }
#else
  if (launched_ranks > 1) {
    throw InputError("command line", "mpirun",
                     fmt::format("{} ranks were launched, but this strata was built without MPI",
                                 launched_ranks),
                     "install Open MPI (libopenmpi-dev; make setup does) and rebuild, or run "
                     "strata search without mpirun");
  }
#endif
  // Ranks on one machine share its cores.
  if (options_.threads == 0) {
    const int local_ranks = std::max(1, launcher_int("OMPI_COMM_WORLD_LOCAL_SIZE"));
    const auto cores = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
    options_.threads = std::max<int64_t>(1, cores / local_ranks);
  }
  threads_ = std::make_unique<ThreadEvaluator>(space, options_, [this] {
    if (on_plan_done_) on_plan_done_();
  });
#if STRATA_HAVE_MPI
  if (ranks_ > 1) mpi_ = std::make_unique<MpiEvaluator>(*threads_, rank_, ranks_);
#endif
}

SearchWorkers::~SearchWorkers() {
#if STRATA_HAVE_MPI
  if (mpi_initialized_) MPI_Finalize();
#endif
}

PlanEvaluator& SearchWorkers::evaluator() {
  if (mpi_) return *mpi_;
  return *threads_;
}

}  // namespace strata::cli
