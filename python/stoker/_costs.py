"""Where a loader that runs the user's Python spends its time: pure decisions for the advice of
stoker.profile and the doctor, fed measurements and nothing else (no clock, no loader), so that
python/tests/test_profile.py checks them on synthetic numbers.

The measurements (taken by _advice.py): the time one sample spends in the Dataset's
__getitem__ and the CPU time it takes there (a sleep or a read waits; decoding computes), the
share of it that holds the GIL (stoker's thread executor: Loader.stats()["gil_share"]), the
executor that runs it, the loader's rate alone at several worker counts, and, for a DataLoader,
the rate of the same batches when __getitem__ costs nothing (a dataset replaying one stored
sample, same batch size, collate, workers and pin_memory): what moving batches between
processes (the collate copy into /dev/shm, pickling the handles, rebuilding them in the main
process) allows by itself.
"""

WAITS_CPU_SHARE = 0.5  # __getitem__ on a CPU less than this share of its time: it mostly waits
LOOSE = 0.5            # a rate at this share of a ceiling or more can be held back by it
GROWTH = 1.1           # the sweep goes on past 2x the cores while a doubling gains this much
MOST_PER_CORE = 16     # ... up to this many workers per core
MOST = 64              # ... and this many in all


def mostly_waits(wall_s, cpu_s):
    """Whether __getitem__ mostly waits (sleep, I/O) rather than computes: True, False, or
    None when it was not measured."""
    if wall_s is None or cpu_s is None or wall_s <= 0:
        return None
    return cpu_s < WAITS_CPU_SHARE * wall_s


def next_count(sweep, waits, cores, usual=None):
    """The next worker count to try past the usual sweep (which ends at `usual`, default twice
    the cores), or None to stop. Only work that waits scales past the cores (a waiting worker
    holds no core); the sweep then doubles the largest count while the last doubling raised the
    rate by GROWTH or more, up to MOST_PER_CORE per core and MOST in all. `sweep` is
    {workers: samples/s} as measured so far."""
    if not waits or not sweep:
        return None
    top = max(sweep)
    if top < (2 * cores if usual is None else usual):
        return None  # the usual sweep is not done
    half = max((w for w in sweep if w <= top // 2), default=None)
    if half is not None and sweep[half] > 0 and sweep[top] < GROWTH * sweep[half]:
        return None  # the last doubling gained too little: more would not help
    nxt = 2 * top
    return nxt if nxt <= min(MOST, MOST_PER_CORE * cores) else None


def getitem_cap(workers, cores, getitem_s, getitem_cpu_s):
    """Samples/s that __getitem__ alone allows at `workers` workers on `cores` cores: each worker
    waits in parallel (workers / seconds per sample) but computes only on a core (at most
    cores / CPU seconds per sample), whichever is lower; None when not measured."""
    if not getitem_s or getitem_s <= 0 or workers < 1:
        return None
    cap = workers / getitem_s
    if getitem_cpu_s and getitem_cpu_s > 0:
        cap = min(cap, min(workers, cores) / getitem_cpu_s)
    return cap


def limit(kind, best_rate=None, transfer_rate=None, getitem_s=None, getitem_cpu_s=None,
          gil_share=None, executor=None, workers=1, cores=1):
    """What limits a loader running the user's Python at its best measured worker count
    (`workers`, where it delivered `best_rate`). Each candidate sets a ceiling; the lowest
    one that the loader comes within LOOSE of is the limit (a ceiling the loader is far below
    cannot be what holds it back, and on a loaded machine two rates measured apart differ by
    tens of percent, so nearness is loose and the comparison of ceilings decides):

    - "transfer" (a DataLoader with workers): transfer_rate, the same batches with a
      __getitem__ that costs nothing, is below what __getitem__ allows (getitem_cap);
      making __getitem__ cheaper or adding workers cannot help, moving fewer bytes can;
    - "gil" (stoker's thread executor): the GIL-held part of __getitem__ runs one sample at a
      time, 1 / (seconds per sample x gil_share) samples/s at most, below getitem_cap;
    - "getitem_wait": __getitem__ mostly waits (more workers overlap the waits);
    - "getitem_cpu": __getitem__ computes (the cores bound it);
    - None: nothing measured to tell.
    Returns (name, that ceiling in samples/s, or None for the __getitem__ kinds)."""
    own = getitem_cap(workers, cores, getitem_s, getitem_cpu_s)
    if kind == "torch" and workers >= 1 and transfer_rate and best_rate is not None and \
            (own is None or transfer_rate < own) and best_rate >= LOOSE * transfer_rate:
        return "transfer", transfer_rate
    if kind == "stoker" and executor == "thread" and gil_share and getitem_s:
        cap = 1.0 / (getitem_s * gil_share)
        if (own is None or cap < own) and best_rate is not None and best_rate >= LOOSE * cap:
            return "gil", cap
    waits = mostly_waits(getitem_s, getitem_cpu_s)
    if waits is None:
        return None, None
    return ("getitem_wait" if waits else "getitem_cpu"), None


def per_sample(python_s, samples):
    """Seconds of the user's Python per sample from stoker's counters (stats()["python_s"],
    ["python_samples"]), or None when none ran."""
    if not python_s or not samples:
        return None
    return python_s / samples
