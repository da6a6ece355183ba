// The launch helpers' host side (dependent launch's scope and counter), compiled for the emulation.
#include "cuda_emulation/emulated_device.h"
// (after it)
#include "backend/cuda/cuda_launch.cu"
