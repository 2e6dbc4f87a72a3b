// LENS_SIMD_CLONES: compile a CPU kernel twice, for x86-64-v3 (AVX2 + FMA) and for the baseline, and let
// the loader pick one per machine (GCC/clang `target_clones`, an ifunc resolved once at load time).
// Why: the extension is built for baseline x86-64 (SSE2) so that one wheel runs everywhere, and the
// exp-heavy token loops then run ~3x slower than on AVX2 (measured on the clamp + exp loop of the
// Eq. 5 ratio: 4.3 vs 1.3 ms for 2M tokens on one core). Elsewhere (other ISAs, compilers, CUDA) it expands to nothing.
#pragma once

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__CUDACC__)
#define LENS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LENS_SIMD_CLONES
#endif
