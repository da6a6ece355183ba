// See fiber_context.h.
#include "cuda_emulation/fiber_context.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)

// mpt_emulation_switch(void** save, void* load): pushes the callee-saved registers and the two
// floating-point control words, stores the stack pointer in *save, loads `load` and pops the same.
// A new fiber's stack holds such a frame whose return address is mpt_emulation_fiber_start, which
// calls the entry kept in r12 with the stack aligned as at a call.
asm(R"(
    .text
    .globl mpt_emulation_switch
    .type mpt_emulation_switch, @function
mpt_emulation_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mpt_emulation_switch, .-mpt_emulation_switch

    .globl mpt_emulation_fiber_start
    .type mpt_emulation_fiber_start, @function
mpt_emulation_fiber_start:
    callq *%r12
    ud2
    .size mpt_emulation_fiber_start, .-mpt_emulation_fiber_start
    .section .note.GNU-stack,"",@progbits
    .text
)");

extern "C" void mpt_emulation_switch(void** save, void* load);
extern "C" void mpt_emulation_fiber_start();

namespace mpt_emulation {

void prepare_context(FiberContext& context, void* base, size_t bytes, void (*entry)()) {
    // The frame mpt_emulation_switch pops: control words, r15, r14, r13, r12 (the entry), rbx, rbp,
    // then the return address; after its ret the stack pointer is 16-byte aligned, as the start
    // stub's call needs.
    const uintptr_t top = (reinterpret_cast<uintptr_t>(base) + bytes) & ~uintptr_t{15};
    uint64_t* frame = reinterpret_cast<uint64_t*>(top - 16 - 64);
    const uint32_t control_words[2] = {0x1f80u, 0x037fu};  // MXCSR and the x87 control word at reset
    std::memcpy(&frame[0], control_words, 8);
    frame[1] = frame[2] = frame[3] = 0;            // r15, r14, r13
    frame[4] = reinterpret_cast<uint64_t>(entry);  // r12
    frame[5] = frame[6] = 0;                       // rbx, rbp
    frame[7] = reinterpret_cast<uint64_t>(&mpt_emulation_fiber_start);
    context.stack_pointer = frame;
}

void switch_context(FiberContext& from, FiberContext& to) {
    mpt_emulation_switch(&from.stack_pointer, to.stack_pointer);
}

}  // namespace mpt_emulation

#else

namespace mpt_emulation {

void prepare_context(FiberContext& context, void* base, size_t bytes, void (*entry)()) {
    getcontext(&context.context);
    context.context.uc_stack.ss_sp = base;
    context.context.uc_stack.ss_size = bytes;
    context.context.uc_link = nullptr;
    makecontext(&context.context, entry, 0);
}

void switch_context(FiberContext& from, FiberContext& to) { swapcontext(&from.context, &to.context); }

}  // namespace mpt_emulation

#endif
