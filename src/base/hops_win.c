/* base/hops_win.c - the release path's step stamps on Windows (base/hops.h): always off. The hook is
   the benches' (bench_coord maps the file it names), and the benches run on Linux only. */
#include "base/hops.h"

_Atomic(int64_t *) comem_hops_slots;
atomic_int comem_hops_state;

void comem_hops_init(void) { atomic_store_explicit(&comem_hops_state, 1, memory_order_relaxed); }
