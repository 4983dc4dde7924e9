# Flags Strata does not model, between modelled and ignored ones.
torchrun --nproc_per_node 8 pretrain_gpt.py \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --vocab-size 1000 \
  --fp32-residual-connection --lr 1e-4 --no-gradient-accumulation-fusion --foo 3
