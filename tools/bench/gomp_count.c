/*
 * gomp_count.c - counts OpenMP parallel regions (GOMP_parallel calls) of any program, for issue
 * 9's "few parallel regions" measurement. Not built by meson (a development tool):
 *   gcc -shared -fPIC -O2 tools/bench/gomp_count.c -o /tmp/gomp_count.so -ldl
 *   LD_PRELOAD=/tmp/gomp_count.so build/tools/tgrad train --text ... --steps 20 --quiet
 * prints the count at exit; the difference between two step counts over the step difference is
 * the regions per training step. "one thread" counts the calls whose if() clause was false
 * (GCC passes num_threads 1): they fork nothing but still build a team of one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long calls, one;
typedef void (*fn_t)(void (*)(void *), void *, unsigned, unsigned);
void GOMP_parallel(void (*f)(void *), void *d, unsigned n, unsigned flags)
{
    static fn_t real;
    if (!real)
        real = (fn_t)dlsym(RTLD_NEXT, "GOMP_parallel");
    calls++;
    one += n == 1;
    real(f, d, n, flags);
}
__attribute__((destructor)) static void report(void)
{
    fprintf(stderr, "GOMP_parallel calls: %lu (one thread: %lu)\n", calls, one);
}
