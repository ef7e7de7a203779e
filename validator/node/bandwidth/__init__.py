"""What joins a node's GPUs: copy bandwidth per GPU, the peer matrix, NCCL all-reduce."""
