#!/usr/bin/env bash
# What `strata plan` writes when it succeeds. Each check runs in a fresh temporary directory and
# prints what it ran and why it failed. Plain bash, grep and cmp, so CI needs nothing more.
#
# Usage: plan_outputs.sh CHECK STRATA_BINARY SOURCE_DIR
set -euo pipefail

check=$1 strata=$2 src=$3
# shellcheck source=tests/cli/output_helpers.sh
source "$(dirname "${BASH_SOURCE[0]}")/output_helpers.sh"

# Fails unless the "plan" object of the report FILE (written by --json, pretty-printed with a
# two-space indent) has KEY with VALUE (JSON text, e.g. 2 or "bf16").
expect_plan_field() {
  local file=$1 key=$2 value=$3
  sed -n '/^  "plan": {$/,/^  },\{0,1\}$/p' "$file" | grep -Eq "^    \"$key\": $value,?\$" ||
    fail "the plan object of $file lacks \"$key\": $value"
}

case "$check" in
  report_keys)
    run_strata plan --scenario "$src/scenarios/default.json" --json out.json
    for key in params model_flops_per_step hardware_flops_per_step task_count per_stage \
               peak_memory_bytes fits_in_memory plan model cluster; do
      grep -Eq "^  \"$key\": " out.json || fail "out.json has no top-level key \"$key\""
    done
    grep -q '^  "fits_in_memory": true,$' out.json || fail "the default scenario should fit"
    ;;
  does_not_fit)
    run_strata plan --model llama3-70b --cluster dgx-a100 --gpus 8 --tp 8 --global-batch 8 \
      --seq-len 8192 --json out.json
    grep -q 'DOES NOT FIT' stdout.txt || fail "the summary does not say DOES NOT FIT"
    grep -q '^  "fits_in_memory": false,$' out.json || fail 'out.json lacks "fits_in_memory": false'
    ;;
  megatron_flags)
    run_strata plan --model gpt2-124m --cluster dgx-h100 --tensor-model-parallel-size 2 \
      --pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 8 \
      --seq-length 1024 --recompute-granularity full --use-distributed-optimizer \
      --sequence-parallel --bf16 --json megatron.json
    run_strata plan --model gpt2-124m --cluster dgx-h100 --tp 2 --pp 2 --micro-batch 1 \
      --global-batch 8 --seq-len 1024 --recompute full --zero 1 --sequence-parallel \
      --dtype bf16 --json native.json
    cmp megatron.json native.json || fail "the reports differ: $(diff megatron.json native.json)"
    expect_plan_field native.json zero_stage 1
    expect_plan_field native.json recompute '"full"'
    expect_plan_field native.json sequence_parallel true
    ;;
  deepspeed_config)
    run_strata plan --model tiny-gpt --cluster dgx-h100 --seq-len 256 --dp 2 \
      --deepspeed-config "$src/tests/cli/data/ds_zero2.json" --json out.json
    expect_plan_field out.json zero_stage 2
    expect_plan_field out.json micro_batch 2
    expect_plan_field out.json global_batch 16
    expect_plan_field out.json dp 2
    expect_plan_field out.json dtype '"bf16"'
    ;;
  hf_config)
    # Meta-Llama-3-8B's Hugging Face config.json describes the zoo's llama3-8b.
    common=(--cluster dgx-h100 --tp 8 --global-batch 8 --seq-len 8192 --recompute selective)
    run_strata plan --model "$src/tests/cli/data/hf_llama3_8b_config.json" "${common[@]}" \
      --json hf.json
    run_strata plan --model llama3-8b "${common[@]}" --json zoo.json
    grep -q '"name": "meta-llama/Meta-Llama-3-8B"' hf.json || fail "hf.json lacks the HF name"
    grep -v '^    "name": ' hf.json >hf_unnamed.json
    grep -v '^    "name": ' zoo.json >zoo_unnamed.json
    cmp hf_unnamed.json zoo_unnamed.json ||
      fail "the reports differ beyond the name: $(diff hf_unnamed.json zoo_unnamed.json)"
    ;;
  megatron_script)
    # Megatron-LM's GPT-3 175B example script: its arrays of flags, the torchrun command, the
    # model by flags alone with the vocabulary padded as Megatron pads it (50257 -> 51200 at tp 8,
    # a multiple of 128 x 8), fp16; --gpus on the command line wins over the launcher's 1 x 8.
    run_strata plan --megatron-args "$src/tests/cli/data/megatron/train_gpt3_175b_distributed.sh" \
      --cluster dgx-a100 --gpus 1024 --json out.json
    expect_plan_field out.json tp 8
    expect_plan_field out.json pp 16
    expect_plan_field out.json dp 8
    expect_plan_field out.json global_batch 1536
    expect_plan_field out.json dtype '"fp16"'
    grep -q '^    "vocab": 51200,\{0,1\}$' out.json || fail "the vocabulary is not padded to 51200"
    grep -q '^    "layers": 96,$' out.json || fail "the model does not have 96 layers"
    grep -q 'read, without effect on the prediction: --rampup-batch-size --train-iters' \
      stderr.txt || fail "the note does not list the ignored flags in order"
    ;;
  megatron_deepspeed_script)
    # A Megatron-DeepSpeed script: string variables with line continuations, an echoed command,
    # the DeepSpeed launcher's 2 nodes x 8 GPUs, --deepspeed with its config, --zero-stage and
    # --checkpoint-activations.
    cp "$src/tests/cli/data/megatron/ds_config_gbs512_mbs4.json" .
    run_strata plan --megatron-args "$src/tests/cli/data/megatron/ds_pretrain_gpt_1.3B.sh" \
      --cluster dgx-a100 --json out.json
    expect_plan_field out.json framework '"deepspeed"'
    expect_plan_field out.json zero_stage 1
    expect_plan_field out.json recompute '"full"'
    expect_plan_field out.json tp 2
    expect_plan_field out.json dp 8
    expect_plan_field out.json micro_batch 4
    ;;
  model_by_flags)
    # A model from Megatron-LM's flags alone, its vocabulary padded as Megatron pads it (50257 ->
    # 50304 at tp 1, a multiple of 128); and flags over a zoo model.
    run_strata plan --cluster dgx-h100 --num-layers 12 --hidden-size 768 \
      --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024 \
      --vocab-size 50257 --attention-dropout 0 --hidden-dropout 0 --json flags.json
    grep -q '^    "vocab": 50304,\{0,1\}$' flags.json || fail "the vocabulary is not padded to 50304"
    run_strata plan --cluster dgx-h100 --model gpt2-124m --seq-len 1024 --num-layers 6 \
      --swiglu --normalization RMSNorm --disable-bias-linear --json over.json
    grep -q '^    "layers": 6,$' over.json || fail "--num-layers does not override the zoo model"
    grep -q '^    "ffn_hidden": 2048,$' over.json ||
      fail "--swiglu does not give Megatron's 8/3 h MLP rounded to 64 (2048 for h 768)"
    ;;
  sequence_parallel_at_tp1)
    # Megatron-LM turns sequence parallelism off at tp 1; so does Strata, with a note.
    run_strata plan --model gpt2-124m --cluster dgx-h100 --seq-len 1024 --sequence-parallel \
      --json out.json
    expect_plan_field out.json sequence_parallel false
    grep -q 'note: --sequence-parallel at tp 1 is ignored' stderr.txt || fail "no note"
    ;;
  rank_order)
    # --rank-order lays the ranks out in another order (plan/rank_layout.hpp): DP innermost puts
    # ranks 0 and 1 at dp 0 and 1 of tp 0; Megatron-LM's --use-tp-pp-dp-mapping is
    # tp-cp-ep-pp-dp; the plan JSON keeps the order.
    run_strata plan --model gpt2-124m --cluster dgx-h100 --seq-len 1024 --dp 2 --tp 2 --pp 2 \
      --global-batch 8 --rank-order dp-tp-pp --layout --json out.json
    grep -q '^rank layout (DP innermost, then TP, then PP)$' stdout.txt || fail "no DP-first title"
    grep -Eq '^ +1 +0 +1 +1 +0 +0$' stdout.txt || fail "rank 1 is not dp 1, pp 0, tp 0 on gpu 1"
    grep -Eq '^ +2 +0 +2 +0 +0 +1$' stdout.txt || fail "rank 2 is not dp 0, pp 0, tp 1 on gpu 2"
    expect_plan_field out.json rank_order '"dp-tp-pp-cp-ep"'
    run_strata plan --model gpt2-124m --cluster dgx-h100 --seq-len 1024 --dp 2 --tp 2 --pp 2 \
      --global-batch 8 --use-tp-pp-dp-mapping --layout
    grep -Eq '^ +2 +0 +2 +0 +1 +0$' stdout.txt || fail "rank 2 is not pp 1 under tp-pp-dp"
    ;;
  megatron_moe_script)
    # A Megatron-LM Mixtral script (after its examples/mixtral): the model by flags with 8 experts,
    # top 2, as wide as --ffn-hidden-size; pp 4, the all-to-all dispatcher, grouped GEMMs; the
    # router's loss terms read and ignored; the script's ep 8 of dp 16 on 64 GPUs.
    run_strata plan --megatron-args "$src/tests/cli/data/megatron/train_mixtral_8x7b_distributed.sh" \
      --cluster dgx-h100 --gpus 64 --json out.json
    expect_plan_field out.json pp 4
    expect_plan_field out.json dp 16
    expect_plan_field out.json ep 8
    expect_plan_field out.json moe_dispatcher '"alltoall"'
    expect_plan_field out.json grouped_gemm true
    grep -q '^    "experts": 8,$' out.json || fail "the model does not have 8 experts"
    grep -q '^    "experts_per_token": 2,$' out.json || fail "the model's top-k is not 2"
    grep -q '^    "expert_ffn_hidden": 14336,$' out.json || fail "the experts are not 14336 wide"
    grep -q 'without effect on the prediction: .*--moe-router-load-balancing-type --moe-aux-loss-coeff' \
      stderr.txt || fail "the router's loss flags are not noted as ignored: $(<stderr.txt)"
    ;;
  moe_flags)
    # The MoE stack flags reach the plan: Mixtral 8x7B with the all-to-all dispatcher, grouped
    # GEMMs and the busiest expert at 1.5x the mean writes them into the report's plan, and a
    # scenario with the same keys gives the same report, byte for byte. Without the flags the
    # keys are left out (each written only when it differs from its default).
    model="$src/tests/models/data/mixtral-8x7b.json"
    run_strata plan --model "$model" --cluster dgx-h100 --gpus 16 --pp 4 --global-batch 64 \
      --moe-token-dispatcher-type alltoall --moe-grouped-gemm --moe-imbalance 1.5 --json flags.json
    run_strata plan --scenario "$src/tests/cli/data/moe_scenario.json" --json scenario.json
    cmp flags.json scenario.json || fail "the reports differ: $(diff flags.json scenario.json)"
    expect_plan_field flags.json moe_dispatcher '"alltoall"'
    expect_plan_field flags.json grouped_gemm true
    expect_plan_field flags.json moe_imbalance 1.5
    expect_plan_field flags.json dp 4
    run_strata plan --model "$model" --cluster dgx-h100 --gpus 16 --pp 4 --global-batch 64 \
      --json plain.json
    ! grep -Eq '"(moe_dispatcher|grouped_gemm|moe_imbalance|ep|etp|cp|cp_comm)"' plain.json ||
      fail "plain.json writes an MoE or CP key at its default"
    ;;
  deterministic_graph)
    # A full graph with every kind of task: TP + sequence parallel, interleaved PP, ZeRO 3 over DP.
    args=(plan --model gpt2-124m --cluster dgx-h100 --graph full --tp 2 --pp 2 --vpp 2 --dp 2
          --schedule interleaved --zero 3 --sequence-parallel --seq-len 1024 --global-batch 16
          --recompute selective)
    run_strata "${args[@]}" --emit-graph g1.json --json r1.json
    run_strata "${args[@]}" --emit-graph g2.json --json r2.json
    [[ -s g1.json ]] || fail "g1.json is empty"
    cmp g1.json g2.json || fail "two runs wrote different task graphs"
    cmp r1.json r2.json || fail "two runs wrote different reports"
    ;;
  deepseek_v3_without_mtp)
    # DeepSeek-V3's config trains one multi-token-prediction module, which is refused; Megatron-LM's
    # --mtp-num-layers 0 drops it and the model plans (latent attention and experts), its 61
    # layers split 3 + 14 x 4 + 2 over 16 stages; the report's model has no "mtp_layers".
    run_strata plan --model "$src/tests/models/data/deepseek-v3.json" --mtp-num-layers 0 \
      --cluster dgx-h100 --gpus 128 --tp 8 --pp 16 --first-stage-layers 3 \
      --last-stage-layers 2 --sequence-parallel --global-batch 16 --seq-len 4096 --json out.json
    grep -q 'valid (acyclic' stdout.txt || fail "the graph is not reported valid"
    grep -q '^    "kv_lora_rank": 512,$' out.json || fail "the model lost its latent attention"
    ! grep -q '"mtp_layers"' out.json || fail "the model still has multi-token prediction"
    ;;
  *)
    echo "unknown check '$check'" >&2
    exit 64
    ;;
esac
echo "ok: $check"
