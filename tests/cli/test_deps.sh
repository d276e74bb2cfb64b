# test_deps.sh: scripts/deps.sh waits for the package lock another apt process holds, says so
# (naming the lock and the process), goes on when it is released, and gives up after
# STK_APT_LOCK_WAIT seconds naming it. Offline: the lock files are copies held with flock(1),
# and STK_DEPS_DRY_RUN prints the apt-get commands instead of running them.
. "$(dirname "$0")/lib.sh"
deps="$(cd "$(dirname "$0")/../.." && pwd)/scripts/deps.sh"
export STK_DEPS_DRY_RUN=1 STK_DEPS_MISSING="pkg-a pkg-b"
: > frontend.lock
: > lists.lock
export STK_APT_LOCKS="$PWD/frontend.lock $PWD/lists.lock"

# Nothing held: straight to apt-get, which also waits for the dpkg locks itself.
expect 0 "would run: apt-get -o DPkg::Lock::Timeout=" bash "$deps"
grep -q "install -y -q --no-install-recommends pkg-a pkg-b" out.txt || fail "$(cat out.txt)"
grep -q "waiting" out.txt && fail "waited for a free lock: $(cat out.txt)"

# Held, then released: deps waits (and says which lock and process), then installs.
flock lists.lock bash -c 'echo held > held; while [ ! -e release ]; do sleep 0.05; done' &
holder=$!
while [ ! -e held ]; do sleep 0.05; done
STK_APT_LOCK_WAIT=600 bash "$deps" > wait.out 2>&1 &
waiter=$!
until grep -q "waiting for the package lock" wait.out; do
    kill -0 $waiter 2> /dev/null || fail "deps ended without waiting: $(cat wait.out)"
    sleep 0.05
done
grep -q "would run" wait.out && fail "ran apt-get while the lock was held: $(cat wait.out)"
grep -q "lists.lock held by process $holder (flock)" wait.out || fail "$(cat wait.out)"
touch release
wait $holder
wait $waiter || fail "deps failed after the lock was released: $(cat wait.out)"
grep -q "the package lock is free" wait.out || fail "$(cat wait.out)"
grep -q "would run: .*install" wait.out || fail "no install after the wait: $(cat wait.out)"

# Held for good: deps gives up after the limit, naming the lock, and installs nothing.
rm -f held release
flock frontend.lock bash -c 'echo held > held; while [ ! -e release ]; do sleep 0.05; done' &
holder=$!
while [ ! -e held ]; do sleep 0.05; done
STK_APT_LOCK_WAIT=1 expect 1 "gave up after waiting 1 s for the package lock: $PWD/frontend.lock held by process $holder" bash "$deps"
grep -q "would run" out.txt && fail "ran apt-get without the lock: $(cat out.txt)"
touch release
wait $holder
echo "deps lock: ok"
