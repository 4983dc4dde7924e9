#include "cli/megatron_ignored_flags.hpp"

#include <algorithm>
#include <vector>

namespace strata::cli {

namespace {

// Flags read and ignored, by why they change neither a step's time nor its memory.
struct IgnoredGroup {
  std::string_view reason;
  std::vector<std::string_view> flags;
};

const std::vector<IgnoredGroup>& ignored_groups() {
  static const std::vector<IgnoredGroup> groups = {
      {"data and tokenizer files (the step sees tokens, not where they come from)",
       {"--data-path",
        "--train-data-path",
        "--valid-data-path",
        "--test-data-path",
        "--data-cache-path",
        "--split",
        "--vocab-file",
        "--merge-file",
        "--tokenizer-model",
        "--data-impl",
        "--mock-data",
        "--num-workers",
        "--dataloader-type",
        "--reset-position-ids",
        "--reset-attention-mask",
        "--eod-mask-loss",
        "--no-mmap-bin-files",
        "--data-args-path",
        "--no-create-attention-mask-in-dataloader",
        "--mmap-warmup"}},
      {"checkpoint saving and loading (between steps, not in one)",
       {"--save",
        "--load",
        "--save-interval",
        "--no-save-optim",
        "--no-save-rng",
        "--no-load-optim",
        "--no-load-rng",
        "--finetune",
        "--use-checkpoint-args",
        "--ckpt-format",
        "--use-dist-ckpt",
        "--auto-detect-ckpt-format",
        "--dist-ckpt-format",
        "--async-save",
        "--ckpt-fully-parallel-save",
        "--ckpt-fully-parallel-load",
        "--exit-on-missing-checkpoint",
        "--pretrained-checkpoint",
        "--non-persistent-save-interval",
        "--non-persistent-ckpt-type",
        "--ckpt-assume-constant-structure",
        "--use-checkpoint-opt_param-scheduler",
        "--override-opt_param-scheduler"}},
      {"logging, evaluation and profiling (outside the training step)",
       {"--log-interval",
        "--eval-interval",
        "--eval-iters",
        "--tensorboard-dir",
        "--tensorboard-log-interval",
        "--tensorboard-queue-size",
        "--log-timers-to-tensorboard",
        "--log-batch-size-to-tensorboard",
        "--log-validation-ppl-to-tensorboard",
        "--log-memory-to-tensorboard",
        "--log-world-size-to-tensorboard",
        "--log-params-norm",
        "--log-num-zeros-in-grad",
        "--log-throughput",
        "--log-progress",
        "--log-loss-scale-to-tensorboard",
        "--wandb-project",
        "--wandb-exp-name",
        "--wandb-save-dir",
        "--timing-log-level",
        "--timing-log-option",
        "--exit-interval",
        "--exit-duration-in-mins",
        "--exit-signal-handler",
        "--logging-level",
        "--profile",
        "--profile-step-start",
        "--profile-step-end",
        "--profile-ranks",
        "--use-pytorch-profiler",
        "--record-memory-history",
        "--log-straggler",
        "--barrier-with-L1-time",
        "--no-barrier-with-level-1-timing",
        "--tensorboard-log-interval"}},
      {"learning-rate schedule, optimizer hyperparameters and run length (the values, not the "
       "work of a step)",
       {"--lr",
        "--min-lr",
        "--lr-decay-style",
        "--lr-decay-iters",
        "--lr-decay-samples",
        "--lr-warmup-iters",
        "--lr-warmup-samples",
        "--lr-warmup-fraction",
        "--lr-warmup-init",
        "--lr-decay-tokens",
        "--lr-warmup-tokens",
        "--train-tokens",
        "--lr-wsd-decay-style",
        "--lr-wsd-decay-samples",
        "--lr-wsd-decay-iters",
        "--weight-decay",
        "--start-weight-decay",
        "--end-weight-decay",
        "--weight-decay-incr-style",
        "--clip-grad",
        "--adam-beta1",
        "--adam-beta2",
        "--adam-eps",
        "--init-method-std",
        "--train-iters",
        "--train-samples",
        "--seed",
        "--loss-scale",
        "--initial-loss-scale",
        "--min-loss-scale",
        "--loss-scale-window",
        "--hysteresis",
        "--init-method-xavier-uniform"}},
      {"the batch-size ramp-up of the first samples (Strata predicts the steady step at "
       "--global-batch-size)",
       {"--rampup-batch-size"}},
      {"numerics that cost the same (epsilons, scalings, the rotary base, where a residual or "
       "norm weight starts)",
       {"--layernorm-epsilon", "--norm-epsilon", "--rotary-base", "--rotary-percent",
        "--rotary-seq-len-interpolation-factor", "--apply-layernorm-1p",
        "--apply-residual-connection-post-layernorm", "--openai-gelu",
        "--apply-query-key-layer-scaling", "--no-query-key-layer-scaling",
        "--attention-softmax-in-fp32", "--use-cpu-initialization", "--no-persist-layer-norm",
        "--calculate-per-token-loss", "--check-for-nan-in-loss-and-grad",
        "--no-check-for-nan-in-loss-and-grad"}},
      // The MoE router's loss terms, scalings and logging (arguments.py, _add_moe_args): each
      // costs a few elementwise passes over a layer's T x experts scores (T x h for the jitter),
      // beside the experts' GEMMs; which tokens a capacity drops, not how many; the balancing
      // bias's update rate (the update is one pass over `experts` values per step). Not here,
      // so refused: --moe-router-dtype fp32 (the router's GEMM in fp32, at 67 of an H100's 989
      // bf16 TFLOP/s: 0.46% of an MoE layer's GEMM FLOPs at DeepSeek-V3's 256 experts of 2048
      // and top 8, then about 7% of their time),
      // --moe-permute-fusion, --moe-pad-expert-input-to-capacity, --moe-shared-expert-overlap,
      // --overlap-moe-expert-parallel-comm, --moe-enable-deepep, --moe-layer-recompute.
      {"the MoE router's loss terms, score scalings and logging (elementwise work on the "
       "router's scores, beside the experts' GEMMs), and which tokens a capacity drops",
       {"--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff",
        "--moe-input-jitter-eps", "--moe-per-layer-logging", "--moe-token-drop-policy",
        "--moe-router-topk-scaling-factor", "--moe-router-pre-softmax",
        "--moe-router-bias-update-rate"}},
      {"the implementation Strata's Megatron preset already assumes (Megatron-Core models on "
       "Transformer Engine, NCCL)",
       {"--use-mcore-models", "--transformer-impl", "--distributed-backend",
        "--distributed-timeout-minutes", "--use-legacy-models", "--manual-gc",
        "--manual-gc-interval", "--deepspeed-activation-checkpointing", "--no-pipeline-parallel",
        "--optimizer"}},
  };
  return groups;
}

}  // namespace

std::optional<std::string_view> ignored_flag_reason(std::string_view flag) {
  for (const IgnoredGroup& group : ignored_groups()) {
    if (std::find(group.flags.begin(), group.flags.end(), flag) != group.flags.end())
      return group.reason;
  }
  return std::nullopt;
}

}  // namespace strata::cli
