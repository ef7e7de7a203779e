"""Pure parsers for the outputs of NVIDIA tools and the kernel log."""
