// glibc's own allocator entry points. glibc lets an executable define malloc and friends (every
// shared library, libstdc++'s operator new included, then resolves to those definitions), which
// forward here: how the allocation counter and the failing allocator see every allocation.
#pragma once

#include <cstddef>

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* pointer, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
}
