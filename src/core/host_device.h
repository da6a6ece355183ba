// Lets one inline definition of the numerics (activations, loss head, optimizer rules, loss scaler)
// serve both the CPU backend and CUDA kernels, so the two backends cannot drift apart.
#pragma once

#if defined(__CUDACC__)
#  define MPT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#  define MPT_HOST_DEVICE inline
#endif
