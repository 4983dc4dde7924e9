# NUM_LAYERS is set by whoever runs the script, not in it.
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $NUM_LAYERS --hidden-size 64
