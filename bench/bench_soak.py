"""bench_soak.py [DURATION_S] [WORKDIR]: a stoker.Loader looping epochs over decoded,
transformed JPEGs (1,000 copies of tests/data/decode/h4v2.jpg, packed) for DURATION seconds
(default 120), RSS sampled every 10 s from /proc/self/status (docs/reliability.md "Soak").
Run as PYTHONPATH=build/python /usr/bin/python3 bench/bench_soak.py."""
import os, shutil, sys, time
import stoker
from stoker import transforms as T

dur = float(sys.argv[1]) if len(sys.argv) > 1 else 120
work = sys.argv[2] if len(sys.argv) > 2 else "/tmp/stoker_soak"
root = os.path.join(work, "src")
src_jpg = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
                       "decode", "h4v2.jpg")
if not os.path.exists(root):
    for c in range(4):
        os.makedirs(f"{root}/c{c}")
        for i in range(250):
            shutil.copy(src_jpg, f"{root}/c{c}/{i}.jpg")
out = os.path.join(work, "ds")
if not os.path.exists(out):
    stoker.pack_image_folder(root, out, shard_size=1 << 20)

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

tf = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.ToTensor()])
loader = stoker.Loader(out, 32, shuffle=True, num_workers=2, transforms=tf, rank=0, world_size=1)
t0 = time.time(); nxt = 0; batches = 0; epochs = 0
print("t_s  rss_mb  batches  epochs")
while True:
    for b in loader:
        batches += 1
        t = time.time() - t0
        if t >= nxt:
            print(f"{t:5.0f}  {rss_mb():7.1f}  {batches:7d}  {epochs:6d}", flush=True)
            nxt += 10
        if t > dur:
            break
    else:
        epochs += 1
        continue
    break
print(f"{time.time()-t0:5.0f}  {rss_mb():7.1f}  {batches:7d}  {epochs:6d}")
loader.close()
