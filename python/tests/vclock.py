"""A virtual clock for the tests that check stoker.profile's arithmetic (test_profile.py, and
the rank jobs of test_ranks.py through ranks_job.py): installed as stoker._profile's `time`, its
perf_counter() moves only when the test's data or step says so, by their nominal durations, so
the waiting share the profile must report is known exactly whatever the machine's load (issue
30). time() stays the real one (trace timestamps)."""
import time


class VirtualClock:
    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now

    def time(self):
        return time.time()
