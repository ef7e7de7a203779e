"""gpuready: take bare NVIDIA GPU hosts to certified, and keep them honest."""

from __future__ import annotations

__version__ = "0.1.0"
