#include "COperationKit.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

void operationkit_futex_wait(uint32_t *address, uint32_t expected) {
    // EAGAIN (the word changed), EINTR (a signal) and spurious wake-ups all return: the caller
    // looks at the word again.
    syscall(SYS_futex, address, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void operationkit_futex_wake_one(uint32_t *address) {
    syscall(SYS_futex, address, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
#endif
