# MoE and CP flags Megatron-LM takes that change the step and that Strata does not model, between
# modelled ones and ones read and ignored (the router's loss terms).
torchrun --nproc_per_node 8 pretrain_gpt.py \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 \
  --num-experts 4 --moe-aux-loss-coeff 1e-2 --moe-router-dtype fp32 --moe-z-loss-coeff 1e-3 \
  --moe-permute-fusion --moe-pad-expert-input-to-capacity --overlap-moe-expert-parallel-comm \
  --moe-router-load-balancing-type seq_aux_loss --hierarchical-context-parallel-sizes 2 2
