"""benchfarm: continuous benchmarking for GPU and mobile kernels."""

__version__ = "0.1.0"
