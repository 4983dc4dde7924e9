#!/bin/bash
# A Megatron-DeepSpeed launch script in the style of examples_deepspeed/ (string variables with
# line continuations, the DeepSpeed launcher, ZeRO stage and activation checkpointing flags).
DIR=`pwd`
NUM_NODE=2
NUM_GPU_PER_NODE=8
MP_SIZE=2
PP_SIZE=1
ZERO_STAGE=1
SEQ_LEN=2048
MODEL_SIZE=1.3
NUM_LAYERS=24
HIDDEN_SIZE=2048
NUM_ATTN_HEADS=16
GLOBAL_BATCH_SIZE=512
BATCH_SIZE=4
LR=2.0e-4
MIN_LR=1.0e-6
VOCAB_PATH="gpt2-vocab.json"
MERGE_PATH="gpt2-merges.txt"
DATA_PATH="/data/the_pile_public_merged_nopreprocessing/pile_text_document"
CHECKPOINT_PATH="checkpoint/gpt_${MODEL_SIZE}B"
config_json="ds_config_gbs${GLOBAL_BATCH_SIZE}_mbs${BATCH_SIZE}.json"

megatron_options=" \
    --override-opt_param-scheduler \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --tensor-model-parallel-size ${MP_SIZE} \
    --init-method-std 0.013 \
    --lr-decay-tokens 300000000000 \
    --lr-warmup-tokens 375000000 \
    --micro-batch-size ${BATCH_SIZE} \
    --global-batch-size ${GLOBAL_BATCH_SIZE} \
    --num-layers ${NUM_LAYERS} \
    --hidden-size ${HIDDEN_SIZE} \
    --num-attention-heads ${NUM_ATTN_HEADS} \
    --seq-length ${SEQ_LEN} \
    --max-position-embeddings ${SEQ_LEN} \
    --train-tokens 300000000000 \
    --train-samples 300000000 \
    --lr ${LR} \
    --min-lr ${MIN_LR} \
    --lr-decay-style cosine \
    --split 949,50,1 \
    --log-interval 10 \
    --eval-interval 100 \
    --eval-iters 10 \
    --save-interval 1000 \
    --weight-decay 0.1 \
    --clip-grad 1.0 \
    --hysteresis 2 \
    --num-workers 0 \
    --fp16 \
    --load ${CHECKPOINT_PATH} \
    --save ${CHECKPOINT_PATH} \
    --tensorboard-queue-size 1 \
    --log-timers-to-tensorboard \
    --log-batch-size-to-tensorboard \
    --log-validation-ppl-to-tensorboard \
    --tensorboard-dir tensorboard"

deepspeed_options=" \
    --deepspeed \
    --deepspeed_config ${config_json} \
    --zero-stage ${ZERO_STAGE} \
    --pipeline-model-parallel-size ${PP_SIZE} \
    --no-pipeline-parallel"

megatron_options="${megatron_options} \
    --checkpoint-activations \
    --deepspeed-activation-checkpointing"

run_cmd="deepspeed --num_nodes ${NUM_NODE} --num_gpus ${NUM_GPU_PER_NODE} ${DIR}/pretrain_gpt.py ${megatron_options} --vocab-file ${VOCAB_PATH} --merge-file ${MERGE_PATH} --data-path ${DATA_PATH} ${deepspeed_options}"
echo ${run_cmd}
eval ${run_cmd}
set +x
