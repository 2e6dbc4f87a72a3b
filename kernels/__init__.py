"""Triton kernels of lens (imported as lens_kernels)."""
