// Harness for plan/deepspeed_config.hpp: a DeepSpeed config as
// `strata plan --model llama3-8b --cluster dgx-h100 --gpus 16 --deepspeed-config FILE` reads it
// (resolve_plan_inputs, cli/plan_options.hpp): read_deepspeed_config through read_json_file, then
// apply_deepspeed_config resolving "auto" values against the model and the 16 GPUs, then the plan's
// validation. Configs with keys that do not change the prediction print a note on stderr, as
// `strata plan` does.

#include "cli/plan_options.hpp"
#include "fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      strata::fuzz::scratch().write("deepspeed.json", strata::fuzz::as_text(data, size));
  return strata::fuzz::run_reader([&] {
    strata::cli::PlanFlags flags;
    flags.model = "llama3-8b";
    flags.cluster = "dgx-h100";
    flags.gpus = 16;
    flags.deepspeed_config = path;
    strata::cli::resolve_plan_inputs(flags);
  });
}
