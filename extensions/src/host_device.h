// GPUMAT_HD marks small functions that the host and CUDA kernels share (random.h, window.h), so
// both devices compute them from one definition.
#pragma once

// GPUMAT_HD_INLINE: one the host compiler must inline too, the body of a host SIMD loop (a call
// per element would keep the loop scalar, and the callee compiled for the baseline ISA).
#ifdef __CUDACC__
#define GPUMAT_HD __host__ __device__ __forceinline__
#define GPUMAT_HD_INLINE __host__ __device__ __forceinline__
#else
#define GPUMAT_HD inline
#define GPUMAT_HD_INLINE [[gnu::always_inline]] inline
#endif
