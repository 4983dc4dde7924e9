#pragma once
// Who simulates a search's plans: the threads of this process, or, under `mpirun -np K strata
// search ...`, K processes that each simulate every K-th plan of a batch on their own threads and
// exchange the outcomes (MPI_Allgatherv), so that every rank runs the same search and rank 0
// prints the ranking a single process would (byte for byte). MPI is used only when the binary was
// built with it (Open MPI from Debian) and mpirun started it.

#include <functional>
#include <memory>

#include "sim/search.hpp"

namespace strata::cli {

class SearchWorkers {
 public:
  // Initializes MPI when launched by mpirun. Throws InputError when launched by mpirun on several
  // ranks but built without MPI.
  SearchWorkers(const SearchSpace& space, const SearchOptions& options);
  ~SearchWorkers();
  SearchWorkers(const SearchWorkers&) = delete;
  SearchWorkers& operator=(const SearchWorkers&) = delete;

  PlanEvaluator& evaluator();
  bool is_root() const { return rank_ == 0; }
  // Called after each plan this process simulates (for its progress bar).
  void set_on_plan_done(std::function<void()> on_done) { on_plan_done_ = std::move(on_done); }

 private:
  class MpiEvaluator;

  SearchOptions options_;  // threads per process settled
  std::function<void()> on_plan_done_;
  std::unique_ptr<ThreadEvaluator> threads_;
  std::unique_ptr<PlanEvaluator> mpi_;
  int rank_ = 0;
  int ranks_ = 1;
  bool mpi_initialized_ = false;
};

}  // namespace strata::cli
