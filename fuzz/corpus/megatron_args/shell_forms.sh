A=( --tp 2
  --pp $((1+1)) ) # c
B="${A[@]} ${C:-x}"
torchrun --nproc_per_node=$((2*4)) x.py ${A[@]} "$B" \
 --seq-length 64
