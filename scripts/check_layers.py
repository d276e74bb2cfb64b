#!/usr/bin/env python3
"""check_layers.py: calls only go down. Reads the rooms of the C tree and what each may use from
docs/design.md (the "check-layers" tables under "Floors"), then fails on

  - a C file of src/, cli/ or python/stoker/_ext/ that matches no room;
  - a cycle among the rooms the table declares;
  - an #include of a header in a room the including file's room may not use;
  - a call (an undefined symbol of an object, `nm`) that another room's object defines, when the
    calling room may not use it; a CLI object calling anything the library does not export
    (src/libstoker.map);
  - a cycle in the graph of the Python package's imports (python/stoker, at the top of a module
    or inside a function).

    python3 scripts/check_layers.py [--root DIR] [--build DIR] [--no-calls]

--build is the build folder holding obj/ (default ROOT/build); each object is looked for where
the Makefile puts it (BUILD/obj/<source path>.o), so stale objects of moved files are ignored.
--no-calls skips the symbol check (no objects needed). Exit 0 when the tree keeps the rules, 1
with one line per violation otherwise. Only the standard library is used.
"""
import argparse
import ast
import fnmatch
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def table(text, marker):
    """Rows of the Markdown table between <!-- check-layers: MARKER --> and the closing mark."""
    m = re.search(r"<!-- check-layers: %s -->(.*?)<!-- /check-layers -->" % marker, text, re.S)
    if not m:
        raise SystemExit(f"check-layers: docs/design.md has no '{marker}' table")
    rows = []
    for line in m.group(1).strip().splitlines()[2:]:  # after the header and its rule
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    return rows


def patterns(cell):
    return re.findall(r"`([^`]+)`", cell)


class Rooms:
    def __init__(self, design):
        self.globs = []  # (pattern, room)
        self.uses = {}
        for name, files, uses in table(design, "rooms"):
            self.uses[name] = {u.strip() for u in uses.split(",") if u.strip()}
            for p in patterns(files):
                self.globs.append((p, name))
        self.exceptions = [(patterns(a)[0], patterns(b)[0]) for a, b, _ in
                           table(design, "exceptions")]
        for name, uses in self.uses.items():
            for u in uses:
                if u not in self.uses:
                    raise SystemExit(f"check-layers: room {name} may use unknown room {u}")

    def of(self, path):
        """The room of a file: its most specific pattern (fewest wildcards, then the longest).
        A format folder is a room of its own, named by the folder."""
        best = None
        for pat, name in self.globs:
            if fnmatch.fnmatchcase(path, pat):
                if pat.count("/") != path.count("/") and "*" in pat:
                    continue  # `src/io/*` is not `src/io/sub/file`
                key = (-pat.count("*"), len(pat))
                if best is None or key > best[0]:
                    best = (key, name, pat)
        if best is None:
            return None, None
        return best[1], best[2]

    def unit(self, path):
        """The room and, for a folder-per-member room (formats), the folder: the unit calls are
        judged between."""
        room, pat = self.of(path)
        if room is None:
            return None
        if pat.count("*") > 1 or pat.endswith("/*/*"):
            return room + ":" + os.path.dirname(path)
        return room

    def allowed(self, src, dst):
        """Whether file src may include or call into file dst."""
        a, b = self.unit(src), self.unit(dst)
        if a is None or b is None or a == b or b == "public":
            return True  # every room is written against the public header
        for x, y in self.exceptions:
            if fnmatch.fnmatchcase(src, x) and fnmatch.fnmatchcase(dst, y):
                return True
        ra, rb = a.split(":")[0], b.split(":")[0]
        if ra == rb:  # two members of a folder-per-member room: formats use the seam, not each other
            return False
        return rb in self.uses[ra]

    def cycle(self):
        return find_cycle(self.uses)


def find_cycle(graph):
    """A cycle of `graph` ({node: set of nodes}) as a path [a, ..., a], or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def c_files(root):
    out = []
    for top in ("src", "cli", "python/stoker/_ext", "include"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith((".c", ".h", ".def")):
                    out.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(out)


def resolve_include(root, src, inc):
    for base in (os.path.dirname(src), "src", "include", "cli"):  # the -I of the builds
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None  # a system header given with quotes, or generated: not ours


def check_includes(root, rooms, files, errors):
    for f in files:
        if rooms.of(f)[0] is None:
            errors.append(f"{f}: in no room of docs/design.md's table (add its folder)")
            continue
        text = open(os.path.join(root, f), errors="replace").read()
        for inc in INCLUDE.findall(text):
            dst = resolve_include(root, f, inc)
            if dst is None or dst == f:
                continue
            if rooms.of(dst)[0] is None:
                continue
            if not rooms.allowed(f, dst):
                errors.append(f"{f}: includes {dst} ({rooms.unit(f)} may not use "
                              f"{rooms.unit(dst)})")


def nm(objs):
    """{object: (defined, undefined)} from one `nm -A` over every object."""
    out = subprocess.run(["nm", "-A"] + objs, capture_output=True, text=True, check=True).stdout
    res = {o: (set(), set()) for o in objs}
    for line in out.splitlines():
        obj, _, rest = line.partition(": ")
        if obj not in res:
            obj, _, rest = line.partition(":")
        p = rest.split()
        if len(p) == 3 and p[1] in "TDBRC":
            res[obj][0].add(p[2])
        elif len(p) == 2 and p[0] == "U":
            res[obj][1].add(p[1])
    return res


def check_calls(root, build, rooms, errors):
    srcs = [f for f in c_files(root) if f.endswith(".c") and f.startswith(("src/", "cli/"))]
    where = {}
    for f in srcs:
        o = os.path.join(build, "obj", f[:-2] + ".o")
        if not os.path.exists(o):
            errors.append(f"{f}: no object {o} (build first: make lib cli)")
            continue
        where[f] = o
    syms = nm(list(where.values())) if where else {}
    objs = {f: syms[o] for f, o in where.items()}
    owner = {}
    for f, (defined, _) in objs.items():
        if f.startswith("src/"):
            for s in defined:
                owner[s] = f
    exported = set(re.findall(r"^\s+(stk_[a-z0-9_]+);", open(os.path.join(root,
                              "src/libstoker.map")).read(), re.M))
    for f, (_, undefined) in objs.items():
        for s in sorted(undefined):
            dst = owner.get(s)
            if dst is None:
                continue  # libc, a dependency
            if f.startswith("cli/"):
                if s not in exported:
                    errors.append(f"{f}: calls {s} ({dst}), which the library does not export")
            elif dst != f and not rooms.allowed(f, dst):
                errors.append(f"{f}: calls {s} in {dst} ({rooms.unit(f)} may not use "
                              f"{rooms.unit(dst)})")


def py_modules(root):
    base = os.path.join(root, "python")
    mods = {}
    for d, _, names in os.walk(os.path.join(base, "stoker")):
        for n in names:
            if n.endswith(".py"):
                rel = os.path.relpath(os.path.join(d, n), base)[:-3].replace(os.sep, ".")
                mods[rel[:-9] if rel.endswith(".__init__") else rel] = os.path.join(d, n)
    return mods


def py_imports(mods, name, path):
    """The stoker modules `name` imports, anywhere in it."""
    pkg = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                p = pkg
                for _ in range(node.level - 1):
                    p = p.rsplit(".", 1)[0]
                base = p + ("." + node.module if node.module else "")
            for a in node.names:
                full = base + "." + a.name
                out.add(full if full in mods else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in mods and m != name}


def check_python(root, errors):
    mods = py_modules(root)
    mods["stoker._core"] = None  # the C extension: a leaf, imports nothing of the package
    graph = {m: py_imports(mods, m, p) if p else set() for m, p in mods.items()}
    # A module of a package also runs the package's __init__ first: that is the package's
    # business, not an import edge of the module's own.
    c = find_cycle(graph)
    if c:
        errors.append("python: import cycle " + " -> ".join(c))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--build", default=None)
    ap.add_argument("--no-calls", action="store_true")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    rooms = Rooms(open(os.path.join(root, "docs/design.md")).read())
    errors = []
    c = rooms.cycle()
    if c:
        errors.append("docs/design.md: the rooms' table has a cycle: " + " -> ".join(c))
    check_includes(root, rooms, c_files(root), errors)
    if not a.no_calls:
        check_calls(root, os.path.abspath(a.build or os.path.join(root, "build")), rooms, errors)
    check_python(root, errors)
    for e in errors:
        print("check-layers: " + e)
    if errors:
        print(f"check-layers: {len(errors)} violation(s) of the floors in docs/design.md")
        return 1
    print("check-layers: includes, calls and Python imports keep the floors of docs/design.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
