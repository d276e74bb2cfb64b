/*
 * stk_json.c: the one JSON reader (and the little writing the library does), without a JSON
 * library: writing a string literal; finding the end of a value, checking that a text is one JSON
 * value (writer metadata, `stoker verify`) and finding the raw text of a top-level key's value
 * (the dataset id and class list in writer metadata, the resume state). Public as building blocks
 * (stk_json_*), so the CLI reads its JSON with it too.
 */
#include "stk_internal.h"

#include <stdio.h>
#include <string.h>

char *stk__json_put(char *p, const char *s)
{
    *p++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            p += sprintf(p, "\\u%04x", c);
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    return p;
}

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* End of the JSON string starting at p ('"'), just past its closing quote; NULL when invalid. */
static const char *str_end(const char *p)
{
    for (p++; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                        return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
    }
    return NULL;
}

/* End of the JSON value at p (whitespace skipped before it), NULL when invalid. depth bounds
 * nesting so a hostile text cannot exhaust the stack. */
static const char *value_end(const char *p, int depth)
{
    p = ws(p);
    if (depth > 64)
        return NULL;
    if (*p == '"')
        return str_end(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                if (*p != '"' || !(p = str_end(p)))
                    return NULL;
                p = ws(p);
                if (*p++ != ':')
                    return NULL;
            }
            if (!(p = value_end(p, depth + 1)))
                return NULL;
            p = ws(p);
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
            p = ws(p);
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        if (strncmp(p, words[i], strlen(words[i])) == 0)
            return p + strlen(words[i]);
    /* number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
    const char *s = p;
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (*++p < '0' || *p > '9')
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        if (*++p == '+' || *p == '-')
            p++;
        if (*p < '0' || *p > '9')
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return p > s ? p : NULL;
}

const char *stk_json_skip(const char *p)
{
    return p ? value_end(p, 0) : NULL;
}

bool stk_json_valid(const char *text)
{
    const char *e = text ? value_end(text, 0) : NULL;
    return e && *ws(e) == '\0';
}

bool stk_json_member(const char *json, const char *key, const char **val, size_t *len)
{
    const char *p = ws(json ? json : "");
    if (*p != '{')
        return false;
    p = ws(p + 1);
    size_t klen = strlen(key);
    while (*p == '"') {
        const char *k = p + 1, *ke = str_end(p);
        if (!ke)
            return false;
        p = ws(ke);
        if (*p++ != ':')
            return false;
        p = ws(p);
        const char *ve = value_end(p, 1);
        if (!ve)
            return false;
        if ((size_t)(ke - 1 - k) == klen && memcmp(k, key, klen) == 0) {
            *val = p;
            *len = (size_t)(ve - p);
            return true;
        }
        p = ws(ve);
        if (*p != ',')
            return false;
        p = ws(p + 1);
    }
    return false;
}
