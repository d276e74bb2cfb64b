#!/usr/bin/env python3
"""check_self_format.py: find error messages formatted into themselves (issue 30).

`STK_FAIL_E(STK_EIO, "%s", err)` formats into `err` with `err` as an argument: vsnprintf with
overlapping source and destination is undefined, and glibc's writes the terminating NUL first,
so the message came out empty ("stoker inspect: " and nothing). This script reads every C file
of the tree and reports each call of a formatting function or macro whose destination buffer
appears among its format arguments; `make test` runs it (exit 1 with the places, 0 when clean).
A call that does it on purpose (the test of the formatter's own protection) says so with the
comment `self-format: on purpose` on the call's lines.

The formatters are known by name (the table below: destination argument, first format
argument); a variadic macro defined in the tree that calls stk__set_error, snprintf or vsnprintf
and is not in the table is itself an error, so a new one cannot slip past unchecked.

    python3 scripts/check_self_format.py [DIR_OR_FILE ...]   # default: src cli python tests
    python3 scripts/check_self_format.py --self-test         # the check finds planted cases
"""
import os
import re
import sys

# name -> (destination: an argument index, or a fixed expression; index of the first argument
#          after the format string)
FORMATTERS = {
    "snprintf": (0, 3),
    "sprintf": (0, 2),
    "stk__set_error": (0, 4),
    "STK_FAIL": (0, 3),
    "STK_FAIL_SIZED": (0, 4),
    "STK_FAIL_E": ("err", 2),  # src/source/stk_source.h: formats into the function's `err`
    "FAIL": ("err", 2),  # src/cuda/stk_cuda.c: the same
    "stk__set_last_error": ("stk_last_errmsg()", 2),  # the per-thread buffer
    "ADD": ("line", 1),  # cli/doctor_report.c: appends to its `line`
}
ALLOW = "self-format: on purpose"  # in a comment on the call's lines: not reported

DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)\(([^)]*)\)", re.M)
CALLS_FORMAT = re.compile(r"\b(stk__set_error|v?snprintf|sprintf)\s*\(")


def quoted_end(text, i):
    """The index just past the string or character literal that starts at text[i]."""
    j, n = i + 1, len(text)
    while j < n and text[j] != text[i]:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def strip_comments(text):
    """Comments become spaces (strings and line structure kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = quoted_end(text, i)
            out.append(text[i:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_args(text, start):
    """Arguments of the call whose '(' is at text[start]: (list of argument texts, end)."""
    depth, i, n, args, cur = 0, start, len(text), [], []
    while i < n:
        c = text[i]
        if c in "\"'":
            j = quoted_end(text, i)
            cur.append(text[i:j])
            i = j
            continue
        if c in "([{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur))
                return args, i
        elif c == "," and depth == 1:
            args.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    return None, n


def mentions(arg, dest):
    """Whether an argument passes the destination buffer itself: `buf`, `(const char *)buf`,
    `buf + n`, `&buf[n]` (a value computed from it, as `q - s`, reads none of its bytes)."""
    a = re.sub(r"\s+", "", arg)
    while True:  # casts and parentheses around the whole argument
        m = re.fullmatch(r"\((?:const)?(?:unsigned)?(?:char|uint8_t|void)\*?\)(.*)", a) or \
            re.fullmatch(r"\((.*)\)", a)
        if not m:
            break
        a = m.group(1)
    d = re.escape(dest)
    return re.fullmatch(r"&?" + d + r"(\[.*\]|\+.*)?", a) is not None


def check_file(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    text = strip_comments(raw)  # the same offsets as raw
    problems = []
    for m in DEFINE.finditer(text):
        name = m.group(1)
        end = text.find("\n", m.end())
        while end > 0 and text[end - 1] == "\\":
            end = text.find("\n", end + 1)
        body = text[m.end():end if end > 0 else len(text)]
        variadic = "..." in m.group(2)  # a macro without `...` formats no message of its caller
        if variadic and CALLS_FORMAT.search(body) and name not in FORMATTERS:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path}:{line}: macro {name} formats a message but "
                            f"scripts/check_self_format.py does not know where to (add it to "
                            f"FORMATTERS)")
    call = re.compile(r"(?<![\w.>])(" + "|".join(map(re.escape, FORMATTERS)) + r")\s*\(")
    for m in call.finditer(text):
        name = m.group(1)
        line_start = text.rfind("\n", 0, m.start()) + 1
        if re.match(r"[ \t]*#[ \t]*define", text[line_start:m.start()]):
            continue  # the macro's own definition
        args, end = split_args(text, m.end() - 1)
        if args is None:
            continue
        dest_spec, first = FORMATTERS[name]
        if isinstance(dest_spec, int):
            if len(args) <= dest_spec:
                continue
            dest = args[dest_spec].strip()
            dest = re.sub(r"^\(\s*(.*?)\s*\)$", r"\1", dest)  # (buf) -> buf
            if not re.fullmatch(r"[\w.>\-\s]+", dest):
                continue  # an expression (buf + n): not compared
            dest = re.sub(r"\s+", "", dest)
        else:
            dest = dest_spec
        line = text.count("\n", 0, m.start()) + 1
        stop = raw.find("\n", end)
        if ALLOW in raw[raw.rfind("\n", 0, m.start()) + 1:stop if stop >= 0 else None]:
            continue  # a test that does it on purpose
        for a in args[first:]:
            if mentions(a, dest):
                problems.append(f"{path}:{line}: {name}(...) formats into {dest} with {dest} "
                                f"among its arguments ({a.strip()}): the message would be "
                                f"empty or garbled")
                break
    return problems


def c_files(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x not in ("build", ".git", "corpus"))
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.join(d, f)


SELF_TEST = r"""
#define MY_FAIL(code, ...) do { rc = stk__set_error(err, err_size, (code), __VA_ARGS__); } while (0)
static void bad(char *err, size_t err_size, char *buf, struct x *h) {
    STK_FAIL_E(STK_EIO, "%s", err);                        /* 1 */
    STK_FAIL(buf, STK_EIO, "%s: %d", (const char *)buf, 3); /* 2 */
    snprintf(buf, 64, "%s and more",
             buf + 2);                                      /* 3: over two lines */
    stk__set_error(h->errmsg, sizeof(h->errmsg), STK_EIO, "at %s", h->errmsg); /* 4 */
    stk__set_last_error(STK_EIO, "%s", stk_last_errmsg());  /* 5 */
    FAIL(STK_EIO, "x %s", &err[0]);                         /* 6 */
}
static void good(char *err, size_t err_size, char *buf, char *q, char *s) {
    STK_FAIL_E(STK_EIO, "%s: %s", path, strerror(errno));
    snprintf(buf, sizeof(buf), "%zu", strlen(buf));
    sprintf(q, "%llu", (unsigned long long)(q - s));
    STK_FAIL(buf, STK_EIO, "\"%s\" err", name); /* err only inside the string */
}
"""


def self_test():
    """The check can fail: a sample with six known instances (and a macro it was not told
    about) must give exactly those seven findings."""
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as f:
        f.write(SELF_TEST)
    try:
        found = check_file(f.name)
    finally:
        os.unlink(f.name)
    lines = sorted(int(p.split(":")[1]) for p in found)
    want = [2, 4, 5, 6, 8, 9, 10]
    if lines != want:
        print("check_self_format: self-test failed: found at lines", lines, "want", want)
        for p in found:
            print("  ", p)
        return 1
    print("check_self_format: self-test: the 7 planted instances found, no false alarm")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    roots = argv[1:] or ["src", "cli", "python", "tests"]
    problems, n = [], 0
    for path in c_files(roots):
        n += 1
        problems += check_file(path)
    for p in problems:
        print(p)
    if problems:
        print(f"check_self_format: {len(problems)} message(s) formatted into themselves")
        return 1
    print(f"check_self_format: {n} C files, no message formatted into itself")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
