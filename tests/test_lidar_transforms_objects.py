"""Object insertion (library, free place, beam-grid occlusion) and removal; the occlusion kernels against their
NumPy references; insertion on a real KITTI frame when the shared data is there."""

from __future__ import annotations

import numpy as np
import pytest

from lidarmt.lidar.errors import LidarTransformError, ObjectLibraryError
from lidarmt.lidar.synthetic import CAR, synthetic_sweep
from lidarmt.lidar.transforms import TransformContext, get_transform
from lidarmt.lidar.transforms import _occlusion_kernels as OK
from lidarmt.lidar.transforms.objects import N_BINS, ObjectLibrary, _cells, box_mask
from lidarmt.types import MetaType


@pytest.fixture(scope="module")
def sweep():
    return synthetic_sweep(n_azimuth=2083, objects=())  # an empty street: walls and road


@pytest.fixture(scope="module")
def library():
    return ObjectLibrary.from_frames([synthetic_sweep(n_azimuth=2083)], min_points=20)


class StripRoi:
    """The road: |y| < 6 m."""

    empty = False

    def contains(self, xy):
        return np.abs(np.asarray(xy)[:, 1]) < 6.0


def test_library_cuts_objects_in_their_box_frame(library):
    assert len(library) == 6
    cars = [o for o in library.objects if o.meta == MetaType.SMALLMOT]
    assert len(cars) == 4 and all((o.length, o.width, o.height) == pytest.approx(CAR) for o in cars)
    for o in library.objects:
        assert np.all(np.abs(o.points[:, 0]) <= o.length / 2 + 0.11)
        assert np.all(o.points[:, 2] >= 0.2 - 1e-4) and np.all(o.points[:, 2] <= o.height + 0.11)
    assert len(library.fingerprint()) == 64
    assert library.fingerprint() == ObjectLibrary.from_frames([synthetic_sweep(n_azimuth=2083)],
                                                              min_points=20).fingerprint()


def test_insertion_places_occludes_and_thins(sweep, library):
    ins = get_transform("insert")
    ctx = TransformContext(roi=StripRoi(), library=library)
    placed = 0
    for seed in range(6):
        c = ins.apply(sweep, {"distance_m": 15.0}, seed=seed, context=ctx)
        if not c.info["placed"]:
            continue
        placed += 1
        box = c.inserted[0]
        assert abs(box["cy"]) < 6.0 and 14.0 <= np.hypot(box["cx"], box["cy"]) <= 16.0
        added = c.frame.points[c.origin < 0]
        assert len(added) == c.info["n_object"] > 10
        assert box_mask(added, box, clearance=-0.05, margin=0.12).all()
        # one return per beam: no two added points share a (ring, azimuth bin) cell
        ring, abin, _ = _cells(added["x"].astype(float), added["y"].astype(float), added["z"].astype(float))
        assert len(np.unique(ring * N_BINS + abin)) == len(added)
        # what was dropped lies behind the object: in its rings, within its azimuths, farther away
        gone = sweep.points[c.dropped]
        assert len(gone) == c.info["n_occluded"] > 0
        gr, gb, grange = _cells(gone["x"].astype(float), gone["y"].astype(float), gone["z"].astype(float))
        ar, ab, arange_ = _cells(added["x"].astype(float), added["y"].astype(float), added["z"].astype(float))
        for r, b, d in zip(gr, gb, grange, strict=True):
            near = (ar == r) & (np.abs((ab - b + N_BINS // 2) % N_BINS - N_BINS // 2) <= 1)
            assert near.any() and arange_[near].min() < d - 0.3
        assert c.frame.labels.boxes[-1]["meta"] == box["meta"]
    assert placed >= 4


def test_insertion_respects_labelled_obstacles(library):
    street = synthetic_sweep(n_azimuth=1024)
    c = get_transform("insert").apply(street, {"distance_m": 12.0}, seed=2,
                                      context=TransformContext(roi=StripRoi(), library=library))
    assert c.info["placed"]
    b = c.inserted[0]
    others = street.labels.boxes
    assert np.all(np.hypot(others["cx"] - b["cx"], others["cy"] - b["cy"]) > 2.0)


def test_insertion_needs_a_library(sweep):
    with pytest.raises(LidarTransformError, match="insert needs an object library") as e:
        get_transform("insert").apply(sweep, "moderate", seed=0)
    assert "\n" not in str(e.value)


def test_no_free_place_leaves_the_sweep_unchanged(sweep, library):
    class Nowhere(StripRoi):
        def contains(self, xy):
            return np.zeros(len(xy), dtype=bool)

    c = get_transform("insert").apply(sweep, "moderate", seed=0, context=TransformContext(roi=Nowhere(),
                                                                                        library=library))
    assert not c.info["placed"] and c.frame.points.tobytes() == sweep.points.tobytes()


def test_removal_drops_the_points_of_its_boxes():
    street = synthetic_sweep(n_azimuth=1024)
    c = get_transform("remove").apply(street, {"count": 2, "max_distance_m": 30.0}, seed=0)
    assert c.info["n_removed"] == len(c.removed) == 2
    gone = set(c.removed["instance"].tolist())
    inst = street.labels.point_instance
    bottom = {int(b["instance"]): b["cz"] - b["height"] / 2 for b in c.removed}
    above = np.array([i in gone and z > bottom[i] + 0.2 for i, z in zip(inst, street.points["z"], strict=True)])
    assert set(np.flatnonzero(above).tolist()) <= set(c.dropped.tolist())
    # what stays of them is the 20 cm above the ground, kept with the ground
    left = c.frame.points[np.isin(c.frame.labels.point_instance, list(gone))]
    assert len(left) < 0.2 * np.count_nonzero(above) and np.all(left["z"] < -1.73 + 0.2 + 1e-3)
    bare = street.with_points(street.points)  # no labels: nothing to remove
    assert get_transform("remove").apply(bare, "light", seed=0).info["n_removed"] == 0


def test_occlusion_kernels_match_references():
    rng = np.random.default_rng(0)
    n = 3000
    ring = rng.integers(0, 64, n)
    abin = rng.integers(0, 50, n)
    d = rng.uniform(1, 50, n)
    np.testing.assert_array_equal(OK.thin_to_beams(ring, abin, d, 64, 50),
                                  OK.thin_to_beams_reference(ring, abin, d, 64, 50))
    sr, sb, sd = rng.integers(0, 64, 5000), rng.integers(0, 50, 5000), rng.uniform(1, 80, 5000)
    for spread in (0, 1, 2):
        got = OK.occluded(sr, sb, sd, ring, abin, d, 64, 50, spread, 0.3)
        np.testing.assert_array_equal(got, OK.occluded_reference(sr, sb, sd, ring, abin, d, 64, 50, spread, 0.3))
    assert 0 < got.mean() < 1


def test_insertion_on_a_real_kitti_frame(kitti_dir):
    from lidarmt.io import open_recording
    from lidarmt.lidar.roi.query import LabelRoi

    root = kitti_dir.parent
    lib = ObjectLibrary.from_recording(str(root), frames=range(1, 7))
    assert len(lib) >= 3 and {o.cls for o in lib.objects} >= {"car"}
    with open_recording(str(root)) as rec:
        frame = rec[0]
    roi = LabelRoi().mask(frame)
    c = get_transform("insert").apply(frame, {"distance_m": 15.0}, seed=0,
                                      context=TransformContext(roi=roi, library=lib))
    assert c.info["placed"] and c.info["n_occluded"] > 0 and c.n_added > 20
    b = c.inserted[0]
    assert roi.contains(np.array([[b["cx"], b["cy"]]]))[0]


def test_empty_library_is_a_one_line_error(tmp_path):
    from lidarmt.io.npzdir import write_npz_folder

    write_npz_folder(tmp_path / "frames", [synthetic_sweep(n_azimuth=64, objects=()).with_points(
        synthetic_sweep(n_azimuth=64, objects=()).points)])
    with pytest.raises(ObjectLibraryError, match="no labelled object"):
        ObjectLibrary.from_recording(str(tmp_path / "frames"))
