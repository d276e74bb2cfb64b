/*
 * stk_strlist.c: string work the byte sources and the path expansion share, with no byte source
 * behind it: a growing list of strings (what list and glob return), sorted in byte order, and
 * path strings (joining a directory and a name).
 */
#include "io/stk_vfs.h"

#include <stdlib.h>
#include <string.h>

stk_status stk__strlist_add(stk__strlist *l, const char *s)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = stk__realloc(l->v, cap * sizeof(*v));
        if (!v)
            return STK_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = stk__strdup(s);
    if (!l->v[l->n])
        return STK_ENOMEM;
    l->n++;
    return STK_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void stk__strlist_sort(stk__strlist *l)
{
    if (l->n > 1) /* qsort(NULL, 0) is undefined */
        qsort(l->v, l->n, sizeof(*l->v), cmp_str);
}

void stk__strlist_free(stk__strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        stk__free(l->v[i]);
    stk__free(l->v);
    memset(l, 0, sizeof(*l));
}

char *stk__path_join(const char *dir, const char *name)
{
    size_t ld = strlen(dir), ln = strlen(name);
    while (ld > 1 && dir[ld - 1] == '/')
        ld--;
    char *s = stk__malloc(ld + ln + 2);
    if (s) {
        memcpy(s, dir, ld);
        s[ld] = '/';
        memcpy(s + ld + 1, name, ln + 1);
    }
    return s;
}
