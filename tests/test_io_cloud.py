"""to_points: the numba one-pass path against the NumPy reference, on the layouts readers meet."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.io.cloud import Field, FieldLayout, to_points, to_points_reference

LAYOUTS = {
    "apollo": ([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("_", "<f4"), ("intensity", "u1"), ("timestamp", "<f8")],
               1.6e9),
    "f64_xyz_f32_i_ring_reltime": ([("x", "<f8"), ("y", "<f8"), ("z", "<f8"), ("intensity", "<f4"), ("ring", "<u2"),
                                    ("time", "<f4")], 0.1),
    "u16_i_ns_offset": ([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<u2"), ("t", "<u4")], 1e5),
    "cyber_u32_i_abs_ns": ([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<u4"), ("timestamp", "<u8")],
                           1.6e18),
    "no_intensity": ([("x", "<f4"), ("y", "<f4"), ("z", "<f4")], None),
    "big_endian": ([("x", ">f4"), ("y", ">f4"), ("z", ">f4"), ("intensity", ">f4")], None),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
@pytest.mark.parametrize("bad", [0, 7])
def test_numba_matches_reference(name, bad):
    fields, tscale = LAYOUTS[name]
    dt = np.dtype(fields)
    rng = np.random.default_rng(3)
    n = 5000
    a = np.zeros(n, dtype=dt)
    for f, t in fields:
        if f in "xyz":
            a[f] = rng.normal(size=n) * 30
        elif f == "_":
            continue
        elif np.dtype(t).kind == "f":
            a[f] = rng.uniform(0, 1, n) * (tscale if f in ("time", "timestamp") and tscale else 255)
        else:
            hi = np.iinfo(np.dtype(t)).max if f not in ("timestamp", "t") else int(tscale)
            a[f] = rng.integers(0, min(hi, 2**62), n, dtype=np.uint64).astype(t)
            if f == "timestamp":
                a[f] = np.uint64(tscale) + np.arange(n, dtype=np.uint64) * np.uint64(1000)
    if bad:
        a["x"][rng.choice(n, bad, replace=False)] = np.nan
        a["z"][rng.choice(n, bad, replace=False)] = -np.inf
    layout = FieldLayout(tuple(Field("" if f == "_" else f, dt.fields[f][1], np.dtype(t).str[1:])
                               for f, t in fields), dt.itemsize, big_endian=name == "big_endian")
    got, dropped = to_points(a, layout, stamp=1_600_000_000.25)
    want, dropped_ref = to_points_reference(a, layout, stamp=1_600_000_000.25)
    assert dropped == dropped_ref and (dropped > 0) == bool(bad)
    assert got.dtype == want.dtype
    for k in got.dtype.names:
        np.testing.assert_array_equal(got[k], want[k])
