// The few system calls OperationKit needs that Swift cannot call directly: `syscall` is variadic,
// so Swift does not import it. Only the futex calls of the library's lock (Support/Lock.swift).
#ifndef C_OPERATION_KIT_H
#define C_OPERATION_KIT_H

#include <stdint.h>

#if defined(__linux__)

/// Sleeps while the 32-bit word at `address` holds `expected` (FUTEX_WAIT, process-private).
/// Returns at once if it does not; may also return spuriously.
void operationkit_futex_wait(uint32_t *address, uint32_t expected);

/// Wakes one thread sleeping in `operationkit_futex_wait` on `address` (FUTEX_WAKE, process-private).
void operationkit_futex_wake_one(uint32_t *address);

#endif

/// A hint to the processor that the caller is in a spin loop (x86 `pause`, Arm `yield`).
static inline void operationkit_spin_hint(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

#endif
