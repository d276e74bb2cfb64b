/*
 * stk_npy.c: the NumPy `.npy` header, read as strictly as numpy reads it (issue 30).
 *
 * numpy (`numpy.lib.format._read_array_header`) evaluates the header as a Python literal
 * (`safe_eval`, i.e. `ast.literal_eval`) and then requires a dict with exactly the keys
 * 'descr', 'fortran_order' and 'shape', a bool for 'fortran_order' and a tuple of ints for
 * 'shape'; anything else (trailing garbage, a missing or extra key, `(3)` which is an int, not a
 * tuple) is refused. This file parses the same literal grammar, restricted to what a header can
 * hold: strings ('...' or "...", a u prefix), True/False/None, decimal ints (the `2L` of headers
 * written by Python 2 in format versions 1 and 2, which numpy filters out), tuples, lists and
 * dicts, whitespace and # comments between tokens, nesting at most 32 deep. Two differences,
 * both stricter: a key given twice is refused (numpy keeps the last, so two readers of one file
 * could see two shapes), and string escapes, other string prefixes and other number spellings
 * (0x10, 1_000, floats) are not taken as keys, dtypes or sizes.
 */
#include "common/stk_endian.h"
#include "source/npy/stk_npy.h"

#include <inttypes.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER 65536
#define MAX_DEPTH 32

/* A value of the literal: its kind, and what the header checks need of it. */
typedef enum { V_STR, V_BOOL, V_NONE, V_INT, V_TUPLE, V_LIST, V_DICT } vkind;

typedef struct val {
    vkind kind;
    const char *s; /* V_STR: the characters between the quotes */
    size_t len;
    bool escaped;  /* V_STR: has a backslash (not compared as a name) */
    bool b;        /* V_BOOL */
    bool big;      /* V_INT: does not fit int64 */
    int64_t i;     /* V_INT */
    uint32_t n;    /* V_TUPLE, V_LIST: items */
    bool all_ints; /* V_TUPLE: every item a V_INT (not a bool) that fits */
    int64_t items[STK_MAX_DIMS + 1];
} val;

typedef struct lit {
    const char *p, *end;
    bool long_ints;  /* versions 1 and 2: `2L` is 2 */
    const char *why; /* the first syntax error */
} lit;

static bool fail_at(lit *x, const char *why)
{
    if (!x->why)
        x->why = why;
    return false;
}

/* Skip blanks, line continuations and comments. */
static void skip_ws(lit *x)
{
    for (;;) {
        while (x->p < x->end && *x->p && strchr(" \t\n\r\f\v", *x->p))
            x->p++;
        if (x->p + 1 < x->end && x->p[0] == '\\' && x->p[1] == '\n') {
            x->p += 2;
        } else if (x->p < x->end && *x->p == '#') {
            while (x->p < x->end && *x->p != '\n')
                x->p++;
        } else {
            return;
        }
    }
}

static bool ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The word at x->p if it is exactly `w` (not a prefix of a longer name). */
static bool word(lit *x, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(x->end - x->p) < n || memcmp(x->p, w, n) != 0 ||
        (x->p + n < x->end && ident_char(x->p[n])))
        return false;
    x->p += n;
    return true;
}

static bool parse_value(lit *x, val *v, int depth);

static bool parse_string(lit *x, val *v)
{
    if (*x->p == 'u' || *x->p == 'U')
        x->p++;
    char q = *x->p++;
    if (x->p + 1 < x->end && x->p[0] == q && x->p[1] == q)
        return fail_at(x, "triple-quoted string");
    v->kind = V_STR;
    v->s = x->p;
    v->escaped = false;
    while (x->p < x->end && *x->p != q) {
        if (*x->p == '\n')
            return fail_at(x, "unterminated string");
        if (*x->p == '\\') {
            v->escaped = true;
            x->p++;
        }
        x->p++;
    }
    if (x->p >= x->end)
        return fail_at(x, "unterminated string");
    v->len = (size_t)(x->p - v->s);
    x->p++;
    return true;
}

static bool parse_int(lit *x, val *v)
{
    bool neg = false;
    if (*x->p == '-' || *x->p == '+') { /* one sign: literal_eval takes no more */
        neg = *x->p == '-';
        x->p++;
        skip_ws(x);
    }
    const char *d = x->p;
    uint64_t u = 0;
    bool big = false;
    while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
        unsigned digit = (unsigned)(*x->p++ - '0');
        if (u > (UINT64_MAX - digit) / 10)
            big = true;
        else
            u = u * 10 + digit;
    }
    if (x->p == d)
        return fail_at(x, "invalid syntax");
    if (*d == '0' && x->p - d > 1) /* Python 3 refuses 03 (but takes 00) */
        for (const char *z = d; z < x->p; z++)
            if (*z != '0')
                return fail_at(x, "leading zeros in a decimal integer");
    if (x->long_ints && x->p < x->end && *x->p == 'L')
        x->p++;
    if (x->p < x->end && (ident_char(*x->p) || *x->p == '.'))
        return fail_at(x, "not a decimal integer");
    v->kind = V_INT;
    v->big = big || u > (uint64_t)INT64_MAX + neg;
    v->i = v->big ? 0 : neg ? (int64_t)(0 - u) : (int64_t)u;
    return true;
}

/* Items up to `close` after the opening bracket: `(` gives a tuple only with a comma (or
 * none at all): `(3)` is 3. Tuples keep their int items for the shape. */
static bool parse_seq(lit *x, val *v, char close, int depth)
{
    uint32_t n = 0;
    bool comma = false, all_ints = true;
    int64_t items[STK_MAX_DIMS + 1];
    val item;
    for (;;) {
        skip_ws(x);
        if (x->p < x->end && *x->p == close) {
            x->p++;
            break;
        }
        if (n > 0 && !comma)
            return fail_at(x, "expected ',' between items");
        if (!parse_value(x, &item, depth + 1))
            return false;
        if (item.kind != V_INT || item.big)
            all_ints = false;
        else if (n < STK_MAX_DIMS + 1)
            items[n] = item.i;
        n++;
        skip_ws(x);
        comma = x->p < x->end && *x->p == ',';
        if (comma)
            x->p++;
    }
    if (close == ')' && n == 1 && !comma) { /* parentheses around one value */
        *v = item;
        return true;
    }
    v->kind = close == ')' ? V_TUPLE : V_LIST;
    v->n = n;
    v->all_ints = all_ints;
    memcpy(v->items, items, sizeof(int64_t) * STK_MIN(n, (uint32_t)STK_MAX_DIMS + 1));
    return true;
}

/* A dict anywhere but the top: its entries are only checked for syntax. */
static bool parse_dict(lit *x, int depth, void (*entry)(void *, const val *, const val *),
                       void *ctx)
{
    bool first = true;
    for (;;) {
        skip_ws(x);
        if (x->p < x->end && *x->p == '}') {
            x->p++;
            return true;
        }
        if (!first) {
            if (x->p >= x->end || *x->p != ',')
                return fail_at(x, "expected ',' between entries");
            x->p++;
            skip_ws(x);
            if (x->p < x->end && *x->p == '}') {
                x->p++;
                return true;
            }
        }
        first = false;
        val k, v;
        if (!parse_value(x, &k, depth + 1))
            return false;
        skip_ws(x);
        if (x->p >= x->end || *x->p != ':')
            return fail_at(x, "expected ':' after a key");
        x->p++;
        if (!parse_value(x, &v, depth + 1))
            return false;
        if (entry)
            entry(ctx, &k, &v);
    }
}

static bool parse_value(lit *x, val *v, int depth)
{
    if (depth > MAX_DEPTH)
        return fail_at(x, "nested too deep");
    skip_ws(x);
    memset(v, 0, sizeof(*v));
    if (x->p >= x->end)
        return fail_at(x, "unexpected end");
    char c = *x->p;
    if (c == '\'' || c == '"' ||
        ((c == 'u' || c == 'U') && x->p + 1 < x->end && (x->p[1] == '\'' || x->p[1] == '"')))
        return parse_string(x, v);
    if (c == '(' || c == '[') {
        x->p++;
        return parse_seq(x, v, c == '(' ? ')' : ']', depth);
    }
    if (c == '{') {
        x->p++;
        v->kind = V_DICT;
        return parse_dict(x, depth, NULL, NULL);
    }
    if (c == '-' || c == '+' || (c >= '0' && c <= '9'))
        return parse_int(x, v);
    if (word(x, "True") || word(x, "False")) {
        v->kind = V_BOOL;
        v->b = c == 'T';
        return true;
    }
    if (word(x, "None")) {
        v->kind = V_NONE;
        return true;
    }
    return fail_at(x, "invalid syntax");
}

/* The header's own dict: its three keys, each at most once. */
typedef struct hdict {
    val descr, fortran, shape;
    int seen[3];
    char other[40]; /* the first other key, for the message */
} hdict;

static void header_entry(void *ctx, const val *k, const val *v)
{
    hdict *d = ctx;
    static const char *const names[] = {"descr", "fortran_order", "shape"};
    val *slots[] = {&d->descr, &d->fortran, &d->shape};
    for (int i = 0; i < 3; i++)
        if (k->kind == V_STR && !k->escaped && k->len == strlen(names[i]) &&
            memcmp(k->s, names[i], k->len) == 0) {
            d->seen[i]++;
            *slots[i] = *v;
            return;
        }
    if (!d->other[0])
        snprintf(d->other, sizeof(d->other), "%.*s",
                 k->kind == V_STR ? (int)STK_MIN(k->len, 30) : 5,
                 k->kind == V_STR ? k->s : "(not a string)");
}

/* numpy's descr ('<f4', '|u1') -> dtype; false when unsupported (*why says why). */
static bool parse_descr(const val *v, stk_dtype *dt, const char **why)
{
    static const struct {
        const char *d;
        stk_dtype t;
    } map[] = {{"u1", STK_DTYPE_UINT8},   {"i1", STK_DTYPE_INT8},   {"i2", STK_DTYPE_INT16},
               {"i4", STK_DTYPE_INT32},   {"i8", STK_DTYPE_INT64},  {"f2", STK_DTYPE_FLOAT16},
               {"f4", STK_DTYPE_FLOAT32}, {"f8", STK_DTYPE_FLOAT64}};
    if (v->kind == V_LIST) {
        *why = "structured dtype (descr is a list of fields)";
        return false;
    }
    if (v->kind != V_STR || v->escaped || v->len < 2) {
        *why = "descr that is not a dtype string";
        return false;
    }
    char order = v->s[0];
    if (order == '>') {
        *why = "big-endian data";
        return false;
    }
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if ((order == '<' || order == '|') && v->len == 3 && memcmp(v->s + 1, map[i].d, 2) == 0) {
            *dt = map[i].t;
            return true;
        }
    *why = v->s[1] == 'O' ? "object dtype (pickled Python objects)" : "unsupported dtype";
    return false;
}

stk_status stk__npy_header_size(const uint8_t *pre, size_t n, const char *what, uint64_t *size,
                                char *err, size_t err_size)
{
    if (n < 10)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: not a .npy file (too short)", what);
    if (memcmp(pre, NPY_MAGIC, 6) != 0 || pre[6] < 1 || pre[6] > 3 || (pre[6] > 1 && n < 12))
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: not a .npy file (bad magic or version)", what);
    uint64_t hlen = pre[6] == 1 ? (uint64_t)pre[8] | (uint64_t)pre[9] << 8 : stk__ld32(pre + 8);
    if (hlen > NPY_MAX_HEADER)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (length %" PRIu64 ")", what, hlen);
    *size = (pre[6] == 1 ? 10 : 12) + hlen;
    return STK_OK;
}

stk_status stk__npy_parse(const uint8_t *b, size_t n, const char *what, stk__npy *out, char *err,
                          size_t err_size)
{
    uint64_t end;
    stk_status rc = stk__npy_header_size(b, n, what, &end, err, err_size);
    if (rc < 0)
        return rc;
    if (end > n)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (length %" PRIu64 ", over the %zu bytes)",
                              what, end, n);
    size_t hoff = b[6] == 1 ? 10 : 12;
    const char *h = (const char *)b + hoff;
    lit x = {.p = h, .end = (const char *)b + end, .long_ints = b[6] < 3};
    memset(out, 0, sizeof(*out));
    out->data_offset = end;
    if (memchr(h, '\0', (size_t)(x.end - h)))
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (a NUL byte in the dict)", what);
    hdict d = {0};
    skip_ws(&x);
    bool ok = x.p < x.end && *x.p == '{';
    if (ok) {
        x.p++;
        ok = parse_dict(&x, 0, header_entry, &d);
    } else {
        x.why = "not a dict";
    }
    skip_ws(&x);
    if (ok && x.p < x.end) {
        ok = false;
        x.why = "text after the dict";
    }
    int at = (int)(x.p - h);
    if (!ok)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (%s at character %d of '%.*s')", what, x.why,
                              at, (int)STK_MIN((size_t)(x.end - h), 200), h);
    static const char *const names[] = {"descr", "fortran_order", "shape"};
    for (int i = 0; i < 3; i++) {
        if (d.seen[i] > 1)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: corrupt .npy header ('%s' given twice)", what, names[i]);
        if (d.seen[i] == 0)
            return stk__set_error(err, err_size, STK_EFORMAT, "%s: corrupt .npy header (no '%s')",
                                  what, names[i]);
    }
    if (d.other[0])
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (unexpected key '%s')", what, d.other);
    if (d.shape.kind != V_TUPLE || (!d.shape.all_ints && d.shape.n > 0))
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (shape is not a tuple of integers)", what);
    if (d.fortran.kind != V_BOOL)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt .npy header (fortran_order is not True or False)", what);
    if (d.fortran.b)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: Fortran-order array (save it with np.ascontiguousarray)", what);
    const char *why = "";
    if (!parse_descr(&d.descr, &out->dtype, &why))
        return stk__set_error(err, err_size,
                              d.descr.kind == V_STR || d.descr.kind == V_LIST ? STK_ENOTSUP
                                                                              : STK_EFORMAT,
                              "%s: %s is not supported (%.*s)", what, why,
                              d.descr.kind == V_STR ? (int)STK_MIN(d.descr.len, 20) : 0,
                              d.descr.kind == V_STR ? d.descr.s : "");
    if (d.shape.n > STK_MAX_DIMS + 1)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: shape of %u dimensions: at most %d are supported", what,
                              d.shape.n, STK_MAX_DIMS + 1);
    for (uint32_t i = 0; i < d.shape.n; i++) {
        if (d.shape.items[i] < 0)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: corrupt .npy header (negative dimension %" PRId64 ")", what,
                                  d.shape.items[i]);
        out->dims[i] = d.shape.items[i];
    }
    out->nd = d.shape.n;
    return STK_OK;
}
