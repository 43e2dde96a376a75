"""lidarmt._heap: freed memory kept for the next allocation, the same results either way, and the way out."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="glibc's mallopt (Linux with glibc)")


def _python(code: str, *args: str, **env: str) -> str:
    """Run ``code`` with ``args`` in a fresh interpreter (its own malloc state) and return what it printed;
    ``LIDARMT_HEAP`` only where ``env`` sets it."""
    e = {k: v for k, v in os.environ.items() if k != "LIDARMT_HEAP"}
    e.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=e, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


FAULTS = """
    import resource, sys, torch
    from lidarmt import _heap
    kept = _heap.keep_freed_memory() if sys.argv[-1] == "keep" else False
    def touch(mb):
        x = torch.empty(mb << 18)  # mb MB of float32: beyond glibc's largest mmap threshold (32 MB)
        x.fill_(1.0)
        del x
    touch(80)  # a block freed; the next, smaller one fits in it whatever lies around it
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    touch(64)
    print(kept, _heap.state(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@needs_glibc
def test_a_freed_block_is_not_page_faulted_in_again():
    kept = _python(FAULTS, "keep").split()
    system = _python(FAULTS, "system").split()
    assert kept[:2] == ["True", "kept"] and system[:2] == ["False", "system"]
    # glibc's defaults map the 64 MB afresh: every page faults in again (16,384 4-kB pages; a few dozen where
    # transparent huge pages back it); kept, the block comes back from the heap already mapped
    assert int(system[2]) >= 16
    assert int(kept[2]) * 10 <= int(system[2])


@needs_glibc
def test_the_environment_variable_leaves_glibc_as_it_is():
    out = _python("""
        from lidarmt import _heap
        print(_heap.keep_freed_memory(), _heap.state())
    """, LIDARMT_HEAP="system")
    assert out == "False system"


@needs_glibc
def test_an_unknown_setting_is_named_in_a_warning_and_freed_memory_is_kept():
    out = _python("""
        import warnings
        from lidarmt import _heap
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            kept = _heap.keep_freed_memory()
        print(kept, _heap.state(), "|".join(str(w.message) for w in got))
    """, LIDARMT_HEAP="sytem")
    assert out.startswith("True kept LIDARMT_HEAP='sytem' is neither 'system' nor 'kept'")


@needs_glibc
def test_the_command_keeps_freed_memory_and_the_machine_record_says_so():
    out = _python("""
        import contextlib, io
        from lidarmt import _heap, _machine
        from lidarmt.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            main(["transforms"])
        print(_heap.state(), _machine.describe()["heap"], "heap" in _machine.record())
    """)
    assert out == "kept kept False"


def test_keeping_is_idempotent():
    out = _python("""
        from lidarmt import _heap
        print(_heap.state(), _heap.keep_freed_memory(), _heap.keep_freed_memory(), _heap.state())
    """)
    assert out == ("system True True kept" if GLIBC else "system False False system")


BYTES = """
    import hashlib, sys
    import numpy as np, torch
    from lidarmt import _heap
    from lidarmt.camera.models.registry import get_model
    from lidarmt.lidar.perception.apollo.network import CnnRunner, build_network
    kept = _heap.keep_freed_memory()
    torch.manual_seed(0)
    runner = CnnRunner(build_network(96, seed=3), mode="exact", threads=1)
    grid = torch.rand(1, 8, 96, 96)
    model = get_model("dave-orig")
    images = np.random.default_rng(1).integers(0, 255, (8, 240, 320, 3), dtype=np.uint8)
    h = hashlib.sha256()
    for _ in range(2):  # the second calls meet a heap the first ones have shaped
        for v in runner.run_tensor(grid).values():
            h.update(v.numpy().tobytes())
        h.update(np.ascontiguousarray(model.predict(images)).tobytes())
    print(kept, h.hexdigest())
"""


DAVE_ORIG = ROOT / "lidarmt" / "camera" / "models" / "weights" / "dave-orig.pt"


@needs_glibc
@pytest.mark.skipif(not DAVE_ORIG.is_file(), reason="needs the shipped dave-orig.pt")
def test_the_networks_give_the_same_bytes_with_either_heap():
    """Where the output buffers lie changes, not the arithmetic: Apollo's exact cnnseg and a camera model answer
    byte for byte the same with glibc's defaults and with freed memory kept."""
    kept = _python(BYTES).split()
    system = _python(BYTES, LIDARMT_HEAP="system").split()
    assert kept[0] == "True" and system[0] == "False"
    assert kept[1] == system[1]


@pytest.mark.slow
@needs_glibc
def test_the_benchmark_compares_both_arms_in_fresh_processes(tmp_path: Path) -> None:
    import json

    out = tmp_path / "heap.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_heap.py"), "--repeats", "1", "--calls",
                           "1", "--grid", "64", "--batch", "2", "--models", "dave-orig", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**{k: v for k, v in os.environ.items() if k != "LIDARMT_HEAP"}, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert set(doc["networks"]) == {"cnnseg64-exact", "dave-orig"}
    for row in doc["networks"].values():
        assert row["same_bytes"] is True
        assert row["system"]["wall_s_median"] > 0 and row["kept"]["wall_s_median"] > 0
        assert row["kept"]["faults_median"] >= 0 and row["speedup_wall_median"] > 0
    assert doc["machine"]["isa"] == doc["isa"]
