# Megatron-LM's --cp-comm-type with one type per layer (nargs='+'), which Strata refuses whole
# rather than reading its first value; a redirection after it is not one of its values.
torchrun --nproc_per_node 8 pretrain_gpt.py \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 \
  --context-parallel-size 2 --cp-comm-type p2p a2a > train.log
