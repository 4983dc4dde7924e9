// TransferBuilder: collective plans as engine activities (sim/transfer_builder.hpp).

#include "sim/transfer_builder.hpp"

#include "common/error.hpp"
#include "common/units.hpp"

namespace strata {

TransferBuilder::TransferBuilder(const ClusterSpec& cluster, int64_t gpus, Engine& engine,
                                 std::vector<ProcessorId> processor_of_gpu)
    : topology_(cluster, gpus),
      engine_(engine),
      processor_of_gpu_(std::move(processor_of_gpu)),
      engine_links_(topology_.links().size(), -1),
      image_flows_(topology_.links().size(), 0),
      simulated_flows_(topology_.links().size(), 0) {
  processor_of_gpu_.resize(static_cast<size_t>(gpus), kNoProcessor);
}

LinkId TransferBuilder::engine_link(int32_t topology_link) {
  LinkId& link = engine_links_[static_cast<size_t>(topology_link)];
  if (link < 0) link = engine_.add_link(topology_.link(topology_link).bw_gbps * kBytesPerGB);
  return link;
}

Transfer TransferBuilder::build(std::span<const CollectivePlan> images) {
  STRATA_ASSERT(!images.empty(), "a transfer needs at least one image");
  const CollectivePlan& first = images.front();
  Transfer transfer;
  std::vector<int32_t> touched;
  std::vector<PathHop> hops;
  for (size_t s = 0; s < first.steps.size(); ++s) {
    touched.clear();
    for (const CollectivePlan& image : images) {
      STRATA_ASSERT(image.steps.size() == first.steps.size(),
                    "symmetric images of a collective must have the same steps");
      for (const CollectiveFlow& flow : image.steps[s].flows) {
        for (const int32_t link : flow.links) {
          if (image_flows_[static_cast<size_t>(link)]++ == 0) touched.push_back(link);
        }
      }
    }
    for (const CollectiveFlow& flow : first.steps[s].flows) {
      for (const int32_t link : flow.links) ++simulated_flows_[static_cast<size_t>(link)];
    }
    TransferStep step{first.steps[s].latency_ns, {}};
    for (const CollectiveFlow& flow : first.steps[s].flows) {
      hops.clear();
      for (const int32_t link : flow.links) {
        const auto l = static_cast<size_t>(link);
        const float weight =
            static_cast<float>(image_flows_[l]) / static_cast<float>(simulated_flows_[l]);
        hops.push_back({engine_link(link), weight});
      }
      TransferFlow f;
      f.path = engine_.add_path(hops);
      f.wire_bytes = flow.wire_bytes;
      if (flow.src_gpu >= 0) f.touches[0] = processor_of_gpu_[static_cast<size_t>(flow.src_gpu)];
      if (flow.dst_gpu >= 0 && flow.dst_gpu != flow.src_gpu) {
        f.touches[1] = processor_of_gpu_[static_cast<size_t>(flow.dst_gpu)];
      }
      step.flows.push_back(f);
    }
    for (const int32_t link : touched) {
      image_flows_[static_cast<size_t>(link)] = 0;
      simulated_flows_[static_cast<size_t>(link)] = 0;
    }
    transfer.push_back(std::move(step));
  }
  return transfer;
}

ActivityId TransferBuilder::add(const Transfer& transfer, ActivityId join) {
  std::vector<ActivityId> frontier{join};
  for (const TransferStep& step : transfer) {
    ActivitySpec delay{.kind = ActivityKind::kDelay, .priority = 1};
    delay.duration_ns = step.latency_ns;
    const ActivityId start = engine_.add(delay, frontier);
    frontier.clear();
    for (const TransferFlow& flow : step.flows) {
      ActivitySpec spec{.kind = ActivityKind::kFlow, .priority = 1};
      spec.bytes = flow.wire_bytes;
      spec.path = flow.path;
      spec.touches = flow.touches;
      frontier.push_back(engine_.add(spec, {&start, 1}));
    }
    if (frontier.empty()) frontier.push_back(start);
  }
  if (frontier.size() == 1) return frontier.front();
  return engine_.add({.kind = ActivityKind::kDelay, .priority = 1}, frontier);
}

namespace {

// Runs the plans that `make_plans` returns for the builder's topology, all from time 0 on an
// idle cluster, and returns when each finished.
template <typename MakePlans>
std::vector<TimeNs> time_on_idle_cluster(const ClusterSpec& cluster, int64_t gpus,
                                         MakePlans make_plans) {
  Engine engine;
  TransferBuilder builder(cluster, gpus, engine, {});
  const ActivityId start = engine.add({.kind = ActivityKind::kDelay});
  std::vector<ActivityId> ends;
  for (const CollectivePlan& plan : make_plans(builder)) {
    ends.push_back(builder.add(builder.build({&plan, 1}), start));
  }
  engine.run();
  std::vector<TimeNs> finish;
  for (const ActivityId end : ends) finish.push_back(engine.finish_ns(end));
  return finish;
}

}  // namespace

std::vector<TimeNs> time_collectives(const ClusterSpec& cluster, int64_t gpus,
                                     std::span<const CollectiveRun> runs) {
  return time_on_idle_cluster(cluster, gpus, [runs](const TransferBuilder& builder) {
    std::vector<CollectivePlan> plans;
    for (const CollectiveRun& run : runs) {
      plans.push_back(
          plan_collective(builder.topology(), builder.tuning(), run.kind, run.gpus, run.bytes));
    }
    return plans;
  });
}

std::vector<TimeNs> time_plans(const ClusterSpec& cluster, int64_t gpus,
                               std::span<const CollectivePlan> plans) {
  return time_on_idle_cluster(cluster, gpus, [plans](const TransferBuilder&) { return plans; });
}

}  // namespace strata
