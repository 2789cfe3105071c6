#ifndef C_MALLOC_INFO_H
#define C_MALLOC_INFO_H

#include <stddef.h>

// Swift's Glibc module does not include <malloc.h>, so the heap statistics are read here.

/// Returns the bytes glibc's allocator has handed out and not yet freed: in-use arena chunks
/// (mallinfo2's uordblks) plus mmapped chunks (hblkhd). Returns 0 where mallinfo2 is unavailable.
size_t cmallocinfo_heap_bytes_in_use(void);

#endif
