// The emulated threads' context switch (emulated_threads.cpp): a fiber's registers and stack
// pointer saved and another's restored. On x86-64 a few instructions of our own (callee-saved
// registers, MXCSR and the x87 control word, as the System V ABI has a call preserve them), since
// glibc's swapcontext also saves the signal mask with a system call each time, which was half the
// emulation's time; elsewhere ucontext.
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace mpt_emulation {

struct FiberContext {
#if defined(__x86_64__)
    void* stack_pointer = nullptr;
#else
    ucontext_t context{};
#endif
};

// Sets `context` up to run entry() (which must never return) on the stack [base, base + bytes).
void prepare_context(FiberContext& context, void* base, size_t bytes, void (*entry)());
// Saves the caller's registers in `from` and continues where `to` was saved (or at its entry).
void switch_context(FiberContext& from, FiberContext& to);

}  // namespace mpt_emulation
