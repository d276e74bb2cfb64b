/*
 * stk_budget.c: amounts of memory: the byte sizes users write ("8G", "512MB") and the running
 * budget of a loader (stk_loader_opts.memory_budget) that its decoders charge as they grow.
 */
#include "stk_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Parse "8G", "512M", "1048576", "0" (binary units, optional "B"/"iB"); false if malformed. */
bool stk__parse_size(const char *s, uint64_t *out)
{
    static const char units[] = "kmgt";
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0))
        return false;
    const char *u = *end ? strchr(units, tolower((unsigned char)*end)) : NULL;
    for (const char *k = units; u && k <= u; k++)
        v *= 1024.0;
    end += u != NULL;
    end += *end == 'i';
    end += *end == 'b' || *end == 'B';
    if (*end != '\0' || v >= 18446744073709551615.0)
        return false;
    *out = (uint64_t)v;
    return true;
}

_Thread_local stk__budget *stk__thread_budget;

bool stk__budget_fits(uint64_t limit, uint64_t fixed, uint64_t held, uint64_t grow)
{
    return fixed <= limit && held <= limit - fixed && grow <= limit - fixed - held;
}

bool stk__budget_charge(stk__budget *b, uint64_t grow)
{
    uint64_t held = atomic_load_explicit(&b->held, memory_order_relaxed);
    do {
        if (!stk__budget_fits(b->limit, b->fixed, held, grow))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->held, &held, held + grow,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}
