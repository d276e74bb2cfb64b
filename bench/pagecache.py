"""One page-cache methodology for the raw-record benchmarks (issues 12 and 15).

Raw-record throughput (no transform) is dominated by the kernel's page-cache copy in pread, and
its speed depends on the folio sizes the page cache holds the file in: a file written in small
pieces (Python writers, 8 KB) sits in 4 KiB folios, while the same file evicted and read back
sequentially (as a dataset read from disk is) sits mostly in large folios. A proactive-reclaim
daemon (DAMON) may also evict idle pages between runs, which the loader's random reads then
bring back in small folios. So before every timed run each file of that run is evicted and read
back sequentially (`prepare(paths, "warm")`): every format and the .stk start from the same
state, the one a dataset freshly read from disk has. `--page-cache as-is` keeps whatever state
the file happens to be in (the old behaviour).

    evict(path)              fsync + POSIX_FADV_DONTNEED (the file leaves the page cache)
    warm(path)               evict, then read the whole file sequentially
    large_folio_share(path)  share of its pages in folios >= 64 KiB (None without root)
    cached_share(path)       share of its pages in the page cache (mincore)
"""
import ctypes
import ctypes.util
import mmap
import os
import struct
import sys

MODES = ("warm", "as-is")


def add_argument(ap):
    """The --page-cache flag every raw-record benchmark takes."""
    ap.add_argument("--page-cache", choices=MODES, default="warm",
                    help="warm (default): before every timed run evict each of its files from "
                    "the page cache and read it back sequentially; as-is: leave the page cache "
                    "as it is (the old behaviour)")


def files(path):
    """The regular files under path (itself when it is a file; an LMDB dir's data.mdb, ...)."""
    if os.path.isdir(path):
        return sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs)
    return [path]


def evict(path):
    """Drop path (a file or every file under a directory) from the page cache."""
    for p in files(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm(path):
    """Evict path, then read it sequentially in 128 KiB reads, as `cat` does: readahead then
    fills the cache mostly in large folios (~0.9 of the pages here; reads of 4 MiB leave only
    ~0.5 of them in large folios, so the read size matters)."""
    evict(path)
    for p in files(path):
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 17):
                pass


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def _map(f, size):
    """A private mapping of the file (writable only so ctypes can take its address; nothing is
    written, so every page it shows is the page cache's)."""
    return mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)


def _resident(m, size):
    """mincore vector of the mapping m (one byte a page, bit 0 = resident), or None."""
    npages = (size + 4095) // 4096
    vec = (ctypes.c_ubyte * npages)()
    buf = ctypes.c_char.from_buffer(m)
    try:
        if _libc.mincore(ctypes.addressof(buf), size, vec) != 0:
            return None
    finally:
        del buf
    return vec


def cached_share(path):
    """Share of the file's pages that the page cache holds (mincore; reads nothing in)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 1.0
        m = _map(f, size)
    vec = _resident(m, size)
    m.close()
    return None if vec is None else sum(v & 1 for v in vec) / len(vec)


def large_folio_share(path):
    """Share of the file's pages that the page cache holds in folios of >= 16 pages (64 KiB);
    None when /proc/kpageflags is not readable (root only). Maps the file and touches only the
    pages the cache already holds (mincore), so it reads nothing in and leaves the cache as it
    found it; pages not cached count as not in a large folio."""
    try:
        kf = open("/proc/kpageflags", "rb")
        pm = open("/proc/self/pagemap", "rb")
    except OSError:
        return None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        m = _map(f, size)
    npages = (size + 4095) // 4096
    vec = _resident(m, size)
    if vec is None:
        m.close()
        return None
    for i in range(npages):
        if vec[i] & 1:
            m[i * 4096]
    base = None
    real = os.path.realpath(path)
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith(real):
            base = int(line.split("-")[0], 16)
            break
    pm.seek(base // 4096 * 8)
    ent = struct.unpack(f"{npages}Q", pm.read(npages * 8))
    m.close()
    # folio runs: a head page starts one, its compound tails (KPF_COMPOUND_TAIL, bit 16)
    # continue it; a page not present (bit 63 of its pagemap entry) ends it
    large, run = 0, 0
    for e in ent:
        if not e >> 63 & 1:
            large += run if run >= 16 else 0
            run = 0
            continue
        kf.seek((e & ((1 << 55) - 1)) * 8)
        flags = struct.unpack("Q", kf.read(8))[0]
        if flags >> 16 & 1 and run:
            run += 1
            continue
        large += run if run >= 16 else 0
        run = 1
    large += run if run >= 16 else 0
    return large / npages


def describe(path):
    """'name: cached 1.00, large folios 0.93' for every file under path."""
    out = []
    for p in files(path):
        c, s = cached_share(p), large_folio_share(p)
        out.append(f"{os.path.basename(p)}: cached {'?' if c is None else '%.2f' % c}, "
                   f"large folios {'?' if s is None else '%.2f' % s}")
    return "; ".join(out)


def prepare(paths, mode, log=True):
    """Before a timed run: warm (mode "warm") or leave (mode "as-is") each path, then print each
    file's cached and large-folio shares to stderr. Returns the description lines."""
    lines = []
    for p in paths:
        if mode == "warm":
            warm(p)
        lines.append(describe(p))
    if log:
        for line in lines:
            print(f"  page cache ({mode}) {line}", file=sys.stderr, flush=True)
    return lines
