"""Everything that runs on the GPU host: stdlib and pynvml only, Python 3.9+."""
