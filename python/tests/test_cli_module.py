"""The command line without `make` (issue 30, item 11): `python -m stoker` runs the same CLI as
build/stoker (cli/ is linked into the extension), and `pip install` installs a `stoker` command
that does too. The pip test installs into a temporary prefix, offline (--no-index
--no-build-isolation --no-deps), from this repository; it compiles the extension again, so
`make test-pip` (STK_TEST_PIP=1, a stage of .ci/run) runs it, not `make test`."""
import glob
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import PYTHONPATH, REPO

CLI = os.path.join(os.environ.get("STK_BUILD", os.path.join(REPO, "build")), "stoker")


def run(cmd, env=None, **kw):
    e = dict(os.environ, PYTHONPATH=PYTHONPATH)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e, **kw)


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory):
    """An ImageFolder tree of 6 JPEGs, 3 of them cut in half."""
    from PIL import Image
    root = tmp_path_factory.mktemp("tree")
    rng = np.random.default_rng(0)
    for i in range(6):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(buf, "JPEG")
        data = buf.getvalue()
        d = root / ("broken" if i % 2 else "good")
        d.mkdir(exist_ok=True)
        (d / f"{i}.jpg").write_bytes(data[:len(data) // 2] if i % 2 else data)
    return root


def same_output(a, b):
    """The two runs printed the same, but for the timing figures of verify's summary."""
    cut = [(r.stdout.split(" read in ")[0], r.stderr, r.returncode) for r in (a, b)]
    assert cut[0] == cut[1], (a.stdout, a.stderr, b.stdout, b.stderr)


def test_python_m_stoker_is_the_cli(broken_tree):
    if not os.path.exists(CLI):
        pytest.skip("build/stoker not built")
    for args in (["--help"], ["--version"], ["doctor", "--help"], ["frobnicate"],
                 ["verify", "--quiet", "broken"], ["inspect", "--json", "good"]):
        mod = run([sys.executable, "-m", "stoker", *args], cwd=broken_tree)
        exe = run([CLI, *args], cwd=broken_tree)
        same_output(mod, exe)
    r = run([sys.executable, "-m", "stoker", "verify", "--quiet", "."], cwd=broken_tree)
    assert r.returncode == 1
    assert [line.split(": image: ")[0] for line in r.stdout.splitlines()[:3]] == \
        ["./broken/1.jpg (record 0)", "./broken/3.jpg (record 1)", "./broken/5.jpg (record 2)"]
    assert "6 records in 1 shard: 3 bad (imagefolder keeps no checksums" in r.stdout
    assert run([sys.executable, "-m", "stoker", "frobnicate"]).returncode == 2


def test_python_m_stoker_ends_quietly_on_a_closed_pipe(tmp_path):
    """As the executable: `... | head` ends the command without a traceback (SIGPIPE)."""
    import stoker
    path = str(tmp_path / "d.stk")
    stoker.write_shard(path, {"label": "int64"}, ({"label": i} for i in range(20000)))
    e = dict(os.environ, PYTHONPATH=PYTHONPATH)
    p = subprocess.Popen([sys.executable, "-m", "stoker", "inspect", "--records", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
    assert p.stdout.readline()  # then close our end while it still writes
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) != 0 and "Traceback" not in err, err


@pytest.mark.timeout(1500)  # a first build compiles ~100 C files: minutes on a loaded machine
@pytest.mark.skipif(not os.environ.get("STK_TEST_PIP"),
                    reason="pip compiles the whole extension again (minutes): `make test-pip` "
                           "runs this (a stage of .ci/run)")
def test_pip_install_gives_the_stoker_command(tmp_path, broken_tree):
    """pip install (offline, into a temporary prefix) installs the package and a `stoker`
    command; both run the CLI. Compiling the extension takes minutes the first time; later
    runs reuse build/setuptools."""
    import importlib.util
    missing = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m) is None]
    if missing:  # (found, not imported: setuptools dislikes a distutils imported before it)
        pytest.skip(f"cannot pip install here: no {', '.join(missing)}")
    prefix = tmp_path / "prefix"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index",
                        "--no-build-isolation", "--no-deps", "--prefix", str(prefix), REPO],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    exe = glob.glob(str(prefix / "**" / "bin" / "stoker"), recursive=True)
    site = glob.glob(str(prefix / "**" / "stoker" / "__main__.py"), recursive=True)
    assert len(exe) == 1 and len(site) == 1, (exe, site)
    # the installed package only: no build tree on the path
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(site[0])),
               PATH=os.path.dirname(exe[0]) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(["stoker", "verify", "--quiet", "."], cwd=broken_tree, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "./broken/3.jpg (record 1): image: JPEG" in r.stdout, \
        r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-c", "import stoker; print(stoker.__file__)"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == os.path.join(os.path.dirname(site[0]), "__init__.py"), r
    r = subprocess.run([sys.executable, "-m", "stoker", "--version"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("stoker "), r
    shutil.rmtree(prefix)
