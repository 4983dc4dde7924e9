// NCCL protocol tuning (topologies/collective_tuning.hpp): the protocol picked by size, the
// "collectives" section of the built-in clusters and its JSON round trip, and the errors a user
// sees for a bad section.

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "tests/input_error.hpp"
#include "tests/temp_file.hpp"
#include "topologies/cluster_spec.hpp"
#include "topologies/collective_tuning.hpp"
#include "topologies/topology_json.hpp"

namespace strata {
namespace {

using test::input_error_of;
using test::TempFile;

// pick(bytes) is the first protocol whose max_bytes is 0 or >= bytes: the limits are inclusive
// and the last protocol takes every larger size.
TEST_CASE("pick chooses the protocol by inclusive size limits", "[topologies][collectives]") {
  FabricTuning fabric;
  fabric.protocols = {{Protocol::kLL, 1024, 1, 0.5},
                      {Protocol::kLL128, 4096, 2, 0.9},
                      {Protocol::kSimple, 0, 3, 1.0}};
  CHECK(fabric.pick(0).protocol == Protocol::kLL);
  CHECK(fabric.pick(1024).protocol == Protocol::kLL);
  CHECK(fabric.pick(1025).protocol == Protocol::kLL128);
  CHECK(fabric.pick(4096).protocol == Protocol::kLL128);
  CHECK(fabric.pick(int64_t{1} << 40).protocol == Protocol::kSimple);
  CHECK(std::string(to_string(Protocol::kLL128)) == "LL128");
}

// The defaults have LL, LL128 and Simple per fabric with efficiencies in (0, 1] and the last
// unlimited; NVLS only with in-switch reduction.
TEST_CASE("default tuning is well formed", "[topologies][collectives]") {
  for (const bool nvls : {false, true}) {
    const CollectiveTuning tuning = default_collective_tuning(nvls);
    for (const FabricTuning* fabric : {&tuning.nvlink, &tuning.net}) {
      REQUIRE(fabric->protocols.size() == 3);
      CHECK(fabric->protocols.back().max_bytes == 0);
      for (const ProtocolTuning& protocol : fabric->protocols) {
        CHECK(protocol.bw_efficiency > 0);
        CHECK(protocol.bw_efficiency <= 1);
      }
    }
    CHECK(tuning.nvls.protocols.empty() == !nvls);
  }
}

// NVLink SHARP came with NVSwitch gen 3: DGX H100, H200 and B200 reduce in the switch, DGX A100
// does not. Every built-in file has a fitted section (not the defaults) and cites the
// nccl_busbw.csv rows it was fitted to in its note.
TEST_CASE("built-in clusters carry fitted collective tuning", "[topologies][collectives]") {
  const std::map<std::string, std::pair<bool, std::string>> expected = {
      {"dgx-a100", {false, "'8x A100 SXM node'"}},
      {"dgx-b200", {true, "'AWS P6-B200'"}},
      {"dgx-h100", {true, "'DGX H100'"}},
      {"dgx-h200", {true, "'8x H200 SXM node'"}},
  };
  for (const auto& [name, facts] : expected) {
    INFO(name);
    const ClusterSpec cluster = load_cluster(name);
    CHECK(cluster.in_switch_reduction == facts.first);
    CHECK(cluster.collectives.nvls.protocols.empty() == !facts.first);
    CHECK(cluster.collectives.nvlink.protocols.front().bw_efficiency !=
          default_collective_tuning(false).nvlink.protocols.front().bw_efficiency);
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/topologies/clusters/" + name + ".json");
    const std::string note = nlohmann::json::parse(in).at("note").get<std::string>();
    CHECK_THAT(note, Catch::Contains("nccl_busbw.csv"));
    CHECK_THAT(note, Catch::Contains(facts.second));
  }
}

void check_same_fabric(const FabricTuning& a, const FabricTuning& b) {
  REQUIRE(a.protocols.size() == b.protocols.size());
  for (size_t i = 0; i < a.protocols.size(); ++i) {
    CHECK(a.protocols[i].protocol == b.protocols[i].protocol);
    CHECK(a.protocols[i].max_bytes == b.protocols[i].max_bytes);
    CHECK(a.protocols[i].base_latency_ns == b.protocols[i].base_latency_ns);
    CHECK(a.protocols[i].bw_efficiency == b.protocols[i].bw_efficiency);
  }
}

// cluster_to_json writes the "collectives" section load_cluster reads: every built-in cluster's
// tuning comes back equal.
TEST_CASE("collective tuning JSON round trip", "[topologies][collectives]") {
  for (const auto& name : zoo_cluster_names()) {
    INFO(name);
    const ClusterSpec cluster = load_cluster(name);
    const TempFile file(cluster_to_json(cluster), "strata_collectives");
    const ClusterSpec back = load_cluster(file.path());
    CHECK(back.in_switch_reduction == cluster.in_switch_reduction);
    check_same_fabric(back.collectives.nvlink, cluster.collectives.nvlink);
    check_same_fabric(back.collectives.nvls, cluster.collectives.nvls);
    check_same_fabric(back.collectives.net, cluster.collectives.net);
    CHECK(back.collectives.nvls_min_bytes == cluster.collectives.nvls_min_bytes);
    CHECK(back.collectives.tree_max_bytes == cluster.collectives.tree_max_bytes);
  }
}

nlohmann::json h100_json() {
  nlohmann::json json = cluster_to_json(load_cluster("dgx-h100"));
  json["device"] = "h100-sxm";
  return json;
}

std::optional<InputError> error_of(const nlohmann::json& json) {
  const TempFile file(json, "strata_collectives");
  return input_error_of([&] { load_cluster(file.path()); });
}

// Without a "collectives" section a cluster gets default_collective_tuning(false): no in-switch
// reduction. A section may give only some fabrics; the others keep the defaults.
TEST_CASE("absent collectives take the defaults", "[topologies][collectives]") {
  nlohmann::json json = h100_json();
  json.erase("collectives");
  const TempFile file(json, "strata_collectives");
  const ClusterSpec cluster = load_cluster(file.path());
  CHECK_FALSE(cluster.in_switch_reduction);
  check_same_fabric(cluster.collectives.nvlink, default_collective_tuning(false).nvlink);
  CHECK(cluster.collectives.nvls.protocols.empty());

  nlohmann::json partial = h100_json();
  partial["collectives"] = {
      {"in_switch_reduction", true},
      {"net",
       {{{"protocol", "Simple"}, {"max_bytes", 0}, {"latency_us", 7.5}, {"bw_efficiency", 0.9}}}}};
  const TempFile partial_file(partial, "strata_collectives");
  const ClusterSpec some = load_cluster(partial_file.path());
  REQUIRE(some.collectives.net.protocols.size() == 1);
  CHECK(some.collectives.net.protocols[0].base_latency_ns == 7500);
  check_same_fabric(some.collectives.nvls, default_collective_tuning(true).nvls);
}

// Each mistake in the section names its field: an efficiency above 1, sizes out of order, a last
// protocol with a limit, an unknown protocol or key, a protocol listed twice, an empty list, NVLS
// tuning without in-switch reduction, and in-switch reduction without an NVSwitch.
TEST_CASE("bad collectives sections are refused with the field",
          "[topologies][collectives][errors]") {
  const auto field_of = [](const nlohmann::json& json) {
    const auto error = error_of(json);
    return error ? error->field() : std::string("(loaded)");
  };
  nlohmann::json json = h100_json();
  CHECK(field_of(json) == "(loaded)");

  json = h100_json();
  json["collectives"]["nvlink"][1]["bw_efficiency"] = 1.2;
  CHECK(field_of(json) == "collectives.nvlink[1].bw_efficiency");

  json = h100_json();
  json["collectives"]["nvlink"][1]["max_bytes"] = 1024;  // below LL's 1 MiB
  CHECK(field_of(json) == "collectives.nvlink[1].max_bytes");

  json = h100_json();
  json["collectives"]["net"][2]["max_bytes"] = 1 << 30;
  CHECK(field_of(json) == "collectives.net[2].max_bytes");

  json = h100_json();
  json["collectives"]["net"][0]["max_bytes"] = 0;
  CHECK(field_of(json) == "collectives.net[0].max_bytes");

  json = h100_json();
  json["collectives"]["nvls"][0]["protocol"] = "LL256";
  CHECK(field_of(json) == "collectives.nvls[0].protocol");

  json = h100_json();
  json["collectives"]["nvls"][0]["latency"] = 3;
  CHECK(field_of(json) == "collectives.nvls[0].latency");

  json = h100_json();
  json["collectives"]["nvlink"][1]["protocol"] = "LL";
  CHECK(field_of(json) == "collectives.nvlink[1].protocol");

  json = h100_json();
  json["collectives"]["net"] = nlohmann::json::array();
  CHECK(field_of(json) == "collectives.net");

  json = h100_json();
  json["collectives"]["in_switch_reduction"] = false;
  CHECK(field_of(json) == "collectives.nvls");

  json = h100_json();
  json["intra_node"]["fabric"] = "pcie";
  CHECK(field_of(json) == "collectives.in_switch_reduction");

  json = h100_json();
  json["collectives"]["tree_max_bytes"] = -1;
  CHECK(field_of(json) == "collectives.tree_max_bytes");

  json = h100_json();
  json["collectives"]["nvlink_tuning"] = 1;
  CHECK(field_of(json) == "collectives.nvlink_tuning");
}

// The message names the file, the field and a fix.
TEST_CASE("a collectives error says how to fix it", "[topologies][collectives][errors]") {
  nlohmann::json json = h100_json();
  json["collectives"]["nvls"][0]["bw_efficiency"] = 80;
  const TempFile file(json, "strata_collectives");
  const auto error = input_error_of([&] { load_cluster(file.path()); });
  REQUIRE(error);
  const std::string message = error->what();
  CHECK_THAT(message, Catch::Contains(file.path()));
  CHECK_THAT(message, Catch::Contains("collectives.nvls[0].bw_efficiency"));
  CHECK_THAT(message, Catch::Contains("0.8 for 80%"));
}

}  // namespace
}  // namespace strata
