"""Image sources: Udacity folders, image folders, camera topics of ROS1/ROS2 bags and Cyber records; bad input."""

from __future__ import annotations

import csv

import cv2
import numpy as np
import pytest

from lidarmt.camera.errors import ImageSourceError
from lidarmt.camera.sources import ImageSource, open_images, sniff_images
from lidarmt.camera.sources.decode import RAW_ENCODINGS, decode_bytes, decode_compressed, decode_raw
from lidarmt.camera.sources.recording import SIM_CAMERA_TOPIC, SIM_STEERING_TOPIC
from lidarmt.io import Ros1BagWriter, Ros2BagWriter
from lidarmt.io._synthetic import synthetic_frames
from lidarmt.io.cyber import CyberRecordWriter
from lidarmt.io.ros1 import TYPESTORE as T1
from lidarmt.io.ros2 import TYPESTORE as T2

T0 = 1_479_425_441_182_877_835  # a Udacity frame id (ns)
PERIOD = 100_000_000  # 10 Hz


def rgb_image(seed: int, h: int = 24, w: int = 32) -> np.ndarray:
    """A random RGB picture whose left half is pure red, so a BGR/RGB mix-up shows."""
    img = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    img[:, : w // 2] = (255, 0, 0)
    return img


def write_image(path, rgb: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]))


def write_csv(path, header: list[str], rows: list[list[object]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg and msg
    return msg


# ----------------------------------------------------------------------------------------------- Udacity


@pytest.fixture
def udacity(tmp_path):
    """6 PNG frames in center/ and steering.csv in time order; returns (folder, ids, angles, images)."""
    root = tmp_path / "ud"
    ids = [T0 + k * PERIOD + k for k in range(6)]
    angles = [-0.37, -0.16, 0.0, 0.0123, 0.2, -0.01]
    imgs = [rgb_image(k) for k in range(6)]
    for fid, img in zip(ids, imgs, strict=True):
        write_image(root / "center" / f"{fid}.png", img)
    write_csv(root / "steering.csv", ["frame_id", "steering_angle"], [[i, a] for i, a in zip(ids, angles,
                                                                                            strict=True)])
    return root, ids, angles, imgs


def test_udacity_folder_frames_labels_and_random_access(udacity):
    root, ids, angles, imgs = udacity
    assert sniff_images(root) == "udacity"
    with open_images(root) as src:
        assert isinstance(src, ImageSource)
        assert (src.format, len(src), src.has_labels) == ("udacity", 6, True)
        streamed = list(src)
        for i in (3, 0, 5, 1):  # random access decodes the same frames as streaming
            f = src[i]
            assert f.index == i and f.frame_id == str(ids[i]) and f.label == angles[i]
            assert f.stamp == pytest.approx(ids[i] * 1e-9, abs=1e-6)
            assert f.image.dtype == np.uint8 and f.image.flags.c_contiguous
            np.testing.assert_array_equal(f.image, imgs[i])  # PNG: exact, RGB order
            np.testing.assert_array_equal(streamed[i].image, f.image)
            assert f.detail["file"] == f"center/{ids[i]}.png" and f.source == str(root)
        assert [f.label for f in streamed] == angles
        with pytest.raises(IndexError, match="out of range"):
            src[6]
        with pytest.raises(IndexError):
            src[-1]  # negative indices are refused
        with pytest.raises(TypeError):
            src["1"]  # type: ignore[index]
        d = src.describe()
    assert d["frames"] == 6 and d["image_sizes"] == [{"width": 32, "height": 24, "frames": 6}]
    lab = d["labels"]
    deg = np.degrees(angles)
    assert lab["count"] == 6 and lab["min_deg"] == pytest.approx(deg.min()) and lab["max_deg"] == pytest.approx(
        deg.max())
    assert lab["mean_deg"] == pytest.approx(deg.mean()) and lab["std_deg"] == pytest.approx(deg.std())
    assert lab["straight_share"] == pytest.approx(3 / 6)  # 0.0, 0.0123 rad = 0.70°, -0.01 rad = -0.57°
    assert d["rate_hz"] == pytest.approx(10.0, rel=1e-6) and d["duration"] == pytest.approx(0.5, abs=1e-6)
    assert d["notes"] == []


def test_udacity_unsorted_csv_is_sorted_by_time_and_noted(udacity):
    root, ids, angles, _ = udacity
    order = [2, 0, 1, 5, 3, 4]
    write_csv(root / "steering.csv", ["frame_id", "steering_angle"], [[ids[k], angles[k]] for k in order])
    with open_images(root) as src:
        assert [src[i].frame_id for i in range(6)] == [str(i) for i in ids]
        assert src.labels() == angles
        assert any("not in time order" in n for n in src.describe(sample=1)["notes"])


def test_udacity_interpolated_csv_reads_center_rows_only(udacity):
    root, ids, angles, imgs = udacity
    (root / "steering.csv").unlink()
    header = ["index", "timestamp", "width", "height", "frame_id", "filename", "angle", "torque", "speed"]
    rows = []
    for k, (fid, a) in enumerate(zip(ids, angles, strict=True)):
        for cam in ("left", "center", "right"):
            rows.append([len(rows), fid, 32, 24, f"{cam}_camera", f"{cam}/{fid}.png", a if cam == "center" else 9,
                         0.1, 12.0 + k])
    write_csv(root / "interpolated.csv", header, rows)
    with open_images(root) as src:
        assert len(src) == 6 and src.labels() == angles
        assert src[4].frame_id == str(ids[4]) and src[4].stamp == pytest.approx(ids[4] * 1e-9, abs=1e-6)
        np.testing.assert_array_equal(src[4].image, imgs[4])
        d = src.describe(sample=2)
    assert d["csv"].endswith("interpolated.csv") and d["frames_read"] == 2
    assert any("12 CSV row(s) of other cameras skipped" in n for n in d["notes"])


def test_udacity_csv_path_angle_column_and_images_beside_the_csv(tmp_path):
    root = tmp_path / "flat"
    imgs = {name: rgb_image(k) for k, name in enumerate(["b", "a", "c"])}
    for name, img in imgs.items():
        write_image(root / f"{name}.jpg", img)
    write_image(root / "unused.jpg", rgb_image(9))
    write_csv(root / "labels.csv", ["Frame_ID", " angle "], [["b", 0.5], ["a", -0.5], ["c.jpg", 0.25]])
    with open_images(root / "labels.csv") as src:
        assert src.format == "udacity" and src.path == str(root)
        # ids are not times: the CSV's order is kept, frames have no stamp
        assert [src[i].frame_id for i in range(3)] == ["b", "a", "c"] and src.stamps() == [None] * 3
        assert src.labels() == [0.5, -0.5, 0.25]
        np.testing.assert_array_equal(src[1].image, cv2.imread(str(root / "a.jpg"))[..., ::-1])  # RGB
        d = src.describe()
    assert d["start"] is None and d["rate_hz"] is None
    assert any("1 image(s) have no CSV row" in n for n in d["notes"])


@pytest.mark.parametrize(
    ("header", "rows", "needles"),
    [
        (["id", "value"], [[T0, 0.1]], ["no steering-angle column", "id, value"]),
        (["steering_angle"], [[0.1]], ["no frame_id (or filename) column"]),
        (["frame_id", "steering_angle"], [[T0, 0.1], [T0 + PERIOD, "abc"]], ["line 3", "'abc' is not a number"]),
        (["frame_id", "steering_angle"], [[T0, 0.1], [T0 + PERIOD, ""]], ["line 3", "missing steering angle"]),
        (["frame_id", "steering_angle"], [[T0, 0.1], [T0 + PERIOD]], ["line 3", "missing steering angle"]),
        (["frame_id", "steering_angle"], [[T0, "nan"]], ["line 2", "not finite"]),
        (["frame_id", "steering_angle"], [[T0, "-inf"]], ["line 2", "not finite"]),
        (["frame_id", "steering_angle"], [[T0, 0.1], [T0, 0.2]], ["duplicated", f"frame {T0} on lines 2 and 3"]),
        (["frame_id", "steering_angle"], [], ["no data rows"]),
        (["frame_id", "steering_angle"], [[T0, 0.1], [T0 + 7, 0.2], [T0 + PERIOD, 0.3], [T0 + 9, 0.1]],
         ["2 of 4 frame(s) have no image", f"first: frame {T0 + 7} on line 3", f"center/{T0 + 7}.jpg"]),
    ],
)
def test_udacity_bad_csv_is_one_line_naming_the_fault(tmp_path, header, rows, needles):
    root = tmp_path / "bad"
    for fid in (T0, T0 + PERIOD):
        write_image(root / "center" / f"{fid}.jpg", rgb_image(1))
    write_csv(root / "steering.csv", header, rows)
    with pytest.raises(ImageSourceError) as err:
        open_images(root)
    msg = one_line(err)
    assert "steering.csv" in msg
    for n in needles:
        assert n in msg, (n, msg)


def test_udacity_missing_or_empty_csv(tmp_path):
    root = tmp_path / "nocsv"
    write_image(root / "center" / "1.jpg", rgb_image(0))
    with pytest.raises(ImageSourceError) as err:
        open_images(root)
    assert "no steering CSV" in one_line(err) and "center" in str(err.value)
    (root / "steering.csv").write_bytes(b"")
    with pytest.raises(ImageSourceError, match="empty CSV"):
        open_images(root)
    (root / "steering.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ImageSourceError, match="not a text CSV"):
        open_images(root)
    (root / "steering.csv").unlink()
    write_csv(root / "a.csv", ["frame_id", "angle"], [[1, 0.0]])
    write_csv(root / "b.csv", ["frame_id", "angle"], [[1, 0.0]])
    with pytest.raises(ImageSourceError, match="several CSV files"):
        open_images(root)


def test_broken_images_raise_when_decoded_naming_the_file(udacity):
    root, ids, _, _ = udacity
    good = (root / "center" / f"{ids[1]}.png").read_bytes()
    (root / "center" / f"{ids[0]}.png").write_bytes(b"")
    (root / "center" / f"{ids[1]}.png").write_bytes(good[: len(good) // 2])
    (root / "center" / f"{ids[2]}.png").write_bytes(b"this is not an image at all")
    with open_images(root) as src:  # opening only lists the files
        assert len(src) == 6
        for i, what in [(0, "empty image (0 bytes)"), (1, "truncated PNG"), (2, "not a readable image")]:
            with pytest.raises(ImageSourceError) as err:
                src[i]
            assert f"{ids[i]}.png" in one_line(err) and what in str(err.value)
        assert src[3].label == 0.0123
        (root / "center" / f"{ids[3]}.png").unlink()
        with pytest.raises(ImageSourceError, match="no such image file"):
            src[3]


def test_truncated_jpeg_is_refused():
    ok, buf = cv2.imencode(".jpg", np.full((16, 16, 3), 90, np.uint8))
    assert ok
    data = buf.tobytes()
    assert decode_bytes(data + b"\0\0", "x.jpg").shape == (16, 16, 3)  # zero padding after EOI is fine
    with pytest.raises(ImageSourceError, match="x.jpg: truncated JPEG"):
        decode_bytes(data[:-40], "x.jpg")


@pytest.mark.slow
def test_real_udacity_data(shared_data):
    root = shared_data / "udacity"
    if not (root / "steering.csv").is_file():
        pytest.skip(f"Udacity frames not available at {root}")
    with open(root / "steering.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    n = len(rows)
    with open_images(root) as src:
        assert src.format == "udacity" and len(src) == n > 1
        assert src.labels() == [float(r["steering_angle"]) for r in rows]
        assert [src[i].frame_id for i in (0, n - 1)] == [rows[0]["frame_id"], rows[-1]["frame_id"]]
        d = src.describe()  # decodes every frame
    assert d["image_sizes"] == [{"width": 320, "height": 240, "frames": n}]
    assert d["labels"]["count"] == n and d["rate_hz"] == pytest.approx(10.0, rel=0.01)
    assert d["notes"] == []


# ----------------------------------------------------------------------------------------------- folders


def test_image_folder_natural_order_without_labels(tmp_path):
    root = tmp_path / "imgs"
    names = ["img10.bmp", "img2.jpg", "IMG3.png", "img1.png", "img02b.png"]
    for k, n in enumerate(names):
        write_image(root / n, rgb_image(k))
    (root / ".hidden.png").write_bytes(b"")
    (root / "notes.txt").write_text("not an image")
    (root / "sub").mkdir()
    assert sniff_images(root) == "images"
    with open_images(root) as src:
        assert (src.format, len(src), src.has_labels) == ("images", 5, False)
        assert [f.frame_id for f in src] == ["img1", "img2", "img02b", "IMG3", "img10"]
        f = src[4]
        assert f.label is None and f.stamp is None and f.detail == {"file": "img10.bmp"}
        np.testing.assert_array_equal(f.image, rgb_image(0))  # BMP: exact
        d = src.describe()
    assert d["labels"] is None and d["has_labels"] is False and d["start"] is None
    with open_images(root / "IMG3.png") as one:
        assert len(one) == 1 and one[0].frame_id == "IMG3"
    with pytest.raises(ImageSourceError, match="has no topics; drop --topic"):
        open_images(root, topic="/camera")


def test_folder_without_images_and_missing_paths(tmp_path):
    with pytest.raises(ImageSourceError) as err:
        open_images(tmp_path / "nowhere")
    assert "nowhere: no such file or folder" in one_line(err)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ImageSourceError, match="no images in this folder"):
        open_images(tmp_path / "empty")
    (tmp_path / "doc.txt").write_text("x")
    with pytest.raises(ImageSourceError, match="unknown image source"):
        open_images(tmp_path / "doc.txt")
    (tmp_path / "zero.bag").write_bytes(b"")
    with pytest.raises(ImageSourceError, match="not a ROS1 bag"):
        open_images(tmp_path / "zero.bag")


# ----------------------------------------------------------------------------------------------- recordings


def encode_raw(img: np.ndarray, encoding: str) -> np.ndarray:
    """Raw row bytes (h, row) of an RGB picture (grey for mono) in a ROS encoding."""
    a = np.full(img.shape[:2] + (1,), 255, np.uint8)
    if encoding == "mono16":
        return (img[..., 0].astype(np.uint16) * 256 + 0x7F).astype(">u2").view(np.uint8).reshape(img.shape[0], -1)
    out = {"rgb8": img, "bgr8": img[..., ::-1], "rgba8": np.concatenate([img, a], axis=2),
           "bgra8": np.concatenate([img[..., ::-1], a], axis=2), "mono8": img[..., :1]}[encoding]
    return np.ascontiguousarray(out).reshape(img.shape[0], -1)


def ros_header(T, t_ns: int, *, ros2: bool):
    stamp = T.types["builtin_interfaces/msg/Time"](sec=t_ns // 10**9, nanosec=t_ns % 10**9)
    H = T.types["std_msgs/msg/Header"]
    return H(stamp=stamp, frame_id="camera") if ros2 else H(seq=0, stamp=stamp, frame_id="camera")


def ros_image(T, img: np.ndarray, encoding: str, t_ns: int, *, ros2: bool = False, pad: int = 0):
    rows = encode_raw(img, encoding)
    if pad:
        rows = np.concatenate([rows, np.zeros((rows.shape[0], pad), np.uint8)], axis=1)
    return T.types["sensor_msgs/msg/Image"](
        header=ros_header(T, t_ns, ros2=ros2), height=img.shape[0], width=img.shape[1], encoding=encoding,
        is_bigendian=int(encoding == "mono16"), step=rows.shape[1], data=rows.reshape(-1))


def ros_compressed(T, img: np.ndarray, fmt: str, t_ns: int, *, ros2: bool = False):
    ok, buf = cv2.imencode("." + fmt.replace("jpeg", "jpg"), np.ascontiguousarray(img[..., ::-1]))
    assert ok
    return T.types["sensor_msgs/msg/CompressedImage"](header=ros_header(T, t_ns, ros2=ros2), format=fmt,
                                                      data=buf.reshape(-1))


def grey(img: np.ndarray) -> np.ndarray:
    return np.repeat(img[..., :1], 3, axis=2)


def write_sim_like(writer, T, *, ros2: bool, n: int = 5, clouds: bool = False) -> tuple[list, list, list]:
    """Camera + steering as ``lidarmt simulate`` writes them; steering of frame 2 is 30 ms late, frame 3's is
    missing, frame 4's is 60 ms late (beyond half a period). Returns (times, images, expected labels)."""
    frames = synthetic_frames(n, 50, seed=1) if clouds else None
    times, imgs, labels = [], [], []
    for k in range(n):
        t = T0 + k * PERIOD
        if frames is not None:
            writer.write(frames[k])
        img = rgb_image(10 + k)
        writer.write_message(SIM_CAMERA_TOPIC, "sensor_msgs/msg/Image", ros_image(T, img, "rgb8", t, ros2=ros2), t)
        angle = 0.05 * k - 0.1
        dt = {2: 30_000_000, 4: 60_000_000}.get(k, 0)
        if k != 3:
            writer.write_message(SIM_STEERING_TOPIC, "std_msgs/msg/Float64",
                                 T.types["std_msgs/msg/Float64"](data=angle), t + dt)
        times.append(t)
        imgs.append(img)
        labels.append(None if k in (3, 4) else angle)
    return times, imgs, labels


def test_default_topics_match_the_simulator():
    from lidarmt.lidar.sim.record import CAMERA_TOPIC, STEERING_TOPIC

    assert (SIM_CAMERA_TOPIC, SIM_STEERING_TOPIC) == (CAMERA_TOPIC, STEERING_TOPIC)


def test_ros1_camera_and_steering_as_simulated(tmp_path):
    path = tmp_path / "sim.bag"
    with Ros1BagWriter(path) as w:
        times, imgs, labels = write_sim_like(w, T1, ros2=False, clouds=True)
    assert sniff_images(path) == "ros1"
    with open_images(path) as src:
        assert (src.format, len(src), src.has_labels) == ("ros1", 5, True)
        assert src.topic == SIM_CAMERA_TOPIC and src.steering_topic == SIM_STEERING_TOPIC
        assert src.labels() == [None if v is None else pytest.approx(v) for v in labels]
        streamed = list(src)
        for i in (4, 0, 2, 3):
            f = src[i]
            assert f.frame_id == str(times[i]) and f.stamp == pytest.approx(times[i] * 1e-9)
            assert f.label == (None if labels[i] is None else pytest.approx(labels[i]))
            np.testing.assert_array_equal(f.image, imgs[i])
            np.testing.assert_array_equal(streamed[i].image, imgs[i])
            assert f.detail == {"topic": SIM_CAMERA_TOPIC, "message": i, "encoding": "rgb8"}
            assert f.image.flags.writeable and f.image.flags.owndata  # not a view of the bag's chunk cache
        d = src.describe()
    names = {t["name"] for t in d["topics"]}
    assert {SIM_CAMERA_TOPIC, SIM_STEERING_TOPIC, "/apollo/sensor/velodyne64/compensator/PointCloud2"} <= names
    assert d["labels"]["count"] == 3 and d["labels"]["unlabelled"] == 2
    assert d["rate_hz"] == pytest.approx(10.0)
    assert any("2 frame(s) have no steering message" in n for n in d["notes"])


@pytest.fixture(scope="module")
def encodings_bag(tmp_path_factory):
    """One ROS1 bag, one topic per encoding, two frames each (plus an unknown encoding and a steering topic
    of the wrong type)."""
    path = tmp_path_factory.mktemp("enc") / "enc.bag"
    imgs = [rgb_image(20), rgb_image(21)]
    with Ros1BagWriter(path) as w:
        for k, img in enumerate(imgs):
            t = T0 + k * PERIOD
            for enc in ("bgr8", "mono8", "rgba8", "bgra8", "mono16"):
                src = grey(img) if enc.startswith("mono") else img
                w.write_message(f"/cam/{enc}", "sensor_msgs/msg/Image", ros_image(T1, src, enc, t, pad=4 * k), t)
            for fmt in ("jpeg", "png"):
                w.write_message(f"/cam/{fmt}", "sensor_msgs/msg/CompressedImage",
                                ros_compressed(T1, img, fmt, t), t)
            weird = T1.types["sensor_msgs/msg/Image"](header=ros_header(T1, t, ros2=False), height=2, width=2,
                                                      encoding="32FC1", is_bigendian=0, step=8,
                                                      data=np.zeros(16, np.uint8))
            w.write_message("/cam/weird", "sensor_msgs/msg/Image", weird, t)
            w.write_message("/steer/int", "std_msgs/msg/Int32", T1.types["std_msgs/msg/Int32"](data=1), t)
    return path, imgs


@pytest.mark.parametrize("topic", ["bgr8", "mono8", "rgba8", "bgra8", "mono16", "png", "jpeg"])
def test_ros1_image_encodings_decode_to_rgb(encodings_bag, topic):
    path, imgs = encodings_bag
    with open_images(path, topic=f"/cam/{topic}") as src:
        assert len(src) == 2 and not src.has_labels
        for i, img in enumerate(imgs):
            want = grey(img) if topic.startswith("mono") else img
            got = src[i].image
            assert got.shape == want.shape and got.dtype == np.uint8
            if topic == "jpeg":  # lossy: as opencv decodes the same bytes, in RGB order
                ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]))
                want = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]
                assert got[5, 3, 0] > 200 and got[5, 3, 2] < 60
            np.testing.assert_array_equal(got, want)


def test_ros1_topic_errors_list_the_image_topics(encodings_bag, tmp_path):
    path, _ = encodings_bag
    with pytest.raises(ImageSourceError) as err:
        open_images(path)
    msg = one_line(err)
    assert "several image topics" in msg and "/cam/bgr8 (sensor_msgs/msg/Image, 2)" in msg and "--topic" in msg
    with pytest.raises(ImageSourceError) as err:
        open_images(path, topic="/camera/nope")
    assert "no topic '/camera/nope'" in one_line(err) and "/cam/png" in str(err.value)
    with pytest.raises(ImageSourceError, match="/steer/int is std_msgs/msg/Int32, not an image"):
        open_images(path, topic="/steer/int")
    with pytest.raises(ImageSourceError, match="no steering topic '/nope'"):
        open_images(path, topic="/cam/png", steering_topic="/nope")
    with pytest.raises(ImageSourceError, match="steering topic /steer/int is std_msgs/msg/Int32"):
        open_images(path, topic="/cam/png", steering_topic="/steer/int")
    with open_images(path, topic="cam/weird") as src:  # the leading slash may be left out
        with pytest.raises(ImageSourceError) as err:
            src[0]
        assert "unknown image encoding '32FC1'" in one_line(err) and "/cam/weird message 0" in str(err.value)
    clouds = tmp_path / "clouds.bag"
    with Ros1BagWriter(clouds) as w:
        for f in synthetic_frames(2, 20):
            w.write(f)
    with pytest.raises(ImageSourceError) as err:
        open_images(clouds)
    assert "no image topic in this recording" in one_line(err) and "PointCloud2" in str(err.value)


def test_ros1_steering_topic_option(tmp_path):
    path = tmp_path / "custom.bag"
    imgs = [rgb_image(k) for k in range(3)]
    with Ros1BagWriter(path) as w:
        for k, img in enumerate(imgs):
            t = T0 + k * PERIOD
            w.write_message("/front/image", "sensor_msgs/msg/Image", ros_image(T1, img, "bgr8", t), t)
            w.write_message("/vehicle/steer", "std_msgs/msg/Float32", T1.types["std_msgs/msg/Float32"](data=k / 4),
                            t + 1_000_000)
    with open_images(path) as src:
        assert src.topic == "/front/image" and not src.has_labels and src[1].label is None
    with open_images(path, steering_topic="/vehicle/steer") as src:
        assert src.labels() == [0.0, 0.25, 0.5] and [f.label for f in src] == [0.0, 0.25, 0.5]


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_ros2_camera_and_steering(tmp_path, storage):
    path = tmp_path / f"bag_{storage}"
    with Ros2BagWriter(path, storage=storage) as w:
        times, imgs, labels = write_sim_like(w, T2, ros2=True)
        ok = ros_compressed(T2, imgs[0], "png", times[0], ros2=True)
        w.write_message("/cam/png", "sensor_msgs/msg/CompressedImage", ok, times[0])
    assert sniff_images(path) == "ros2"
    with open_images(path) as src:  # two image topics: lidarmt simulate's camera is the default
        assert (src.format, len(src), src.topic) == ("ros2", 5, SIM_CAMERA_TOPIC)
        assert src[3].frame_id == str(times[3]) and src[3].label is None
        np.testing.assert_array_equal(src[2].image, imgs[2])
        assert src[2].label == pytest.approx(labels[2])
        assert [f.label for f in src] == [None if v is None else pytest.approx(v) for v in labels]
        np.testing.assert_array_equal(list(src)[4].image, imgs[4])
    with open_images(path, topic="/cam/png") as src:
        np.testing.assert_array_equal(src[0].image, imgs[0])


def cyber_record(path, channels: dict[str, list[tuple[int, bytes, str]]]) -> None:
    with CyberRecordWriter(path) as w:
        items = sorted((t, ch, content, mt) for ch, msgs in channels.items() for t, content, mt in msgs)
        for t, ch, content, mt in items:
            w.write_message(ch, mt, content, t)


def test_cyber_image_channels(tmp_path):
    from lidarmt.proto.drivers import COMPRESSED_IMAGE_TYPE, IMAGE_TYPE, CompressedImage, Image

    imgs = [rgb_image(30 + k) for k in range(3)]
    raw_msgs, png_msgs = [], []
    for k, img in enumerate(imgs):
        t = T0 + k * PERIOD
        m = Image(frame_id="front_6mm", measurement_time=t * 1e-9 + 0.5, height=24, width=32, encoding="bgr8",
                  step=32 * 3 + 8, data=np.pad(img[..., ::-1].reshape(24, -1), ((0, 0), (0, 8))).tobytes())
        m.header.timestamp_sec = t * 1e-9
        raw_msgs.append((t, m.SerializeToString(), IMAGE_TYPE))
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(img[..., ::-1]))
        c = CompressedImage(frame_id="front_6mm", format="png", data=buf.tobytes())
        c.header.camera_timestamp = t
        png_msgs.append((t, c.SerializeToString(), COMPRESSED_IMAGE_TYPE))
    path = tmp_path / "cam.record"
    cyber_record(path, {"/apollo/sensor/camera/front_6mm/image": raw_msgs,
                        "/apollo/sensor/camera/front_12mm/image/compressed": png_msgs})
    assert sniff_images(path) == "cyber"
    with open_images(path) as src:  # two image channels: lidarmt simulate's name wins
        assert src.format == "cyber" and src.topic == SIM_CAMERA_TOPIC and len(src) == 3
        assert not src.has_labels
        f = src[1]
        np.testing.assert_array_equal(f.image, imgs[1])
        assert f.stamp == pytest.approx(T0 * 1e-9 + 0.6) and f.detail["encoding"] == "bgr8"
        assert [g.frame_id for g in src] == [str(round((t * 1e-9 + 0.5) * 1e9)) for t, _, _ in raw_msgs]
    with open_images(path, topic="/apollo/sensor/camera/front_12mm/image/compressed") as src:
        assert src[2].frame_id == str(T0 + 2 * PERIOD)
        np.testing.assert_array_equal(src[2].image, imgs[2])
    with pytest.raises(ImageSourceError, match="drop --steering-topic"):
        open_images(path, steering_topic="/steer")
    bad = tmp_path / "bad.record"
    cyber_record(bad, {"/cam": [(T0, Image(height=2, width=2, encoding="yuv420p", data=bytes(6)).SerializeToString(),
                                 IMAGE_TYPE)]})
    with open_images(bad) as src, pytest.raises(ImageSourceError, match="unknown image encoding 'yuv420p'"):
        src[0]
    none = tmp_path / "none.record"
    cyber_record(none, {"/other": [(T0, b"", "apollo.canbus.Chassis")]})
    with pytest.raises(ImageSourceError, match="no image topic in this recording"):
        open_images(none)
    cut = tmp_path / "cut.record"
    cut.write_bytes(path.read_bytes()[:-300])  # the index and the end of the only chunk are lost
    with pytest.raises(ImageSourceError) as err:
        open_images(cut)
    assert "holds no messages (truncated section at byte" in one_line(err)


def test_truncated_ros1_bag_is_one_line(tmp_path):
    path = tmp_path / "full.bag"
    with Ros1BagWriter(path) as w:
        write_sim_like(w, T1, ros2=False)
    cut = tmp_path / "cut.bag"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ImageSourceError) as err:
        open_images(cut)
    assert "cut.bag: unreadable ROS1 bag" in one_line(err)


# ----------------------------------------------------------------------------------------------- raw decoding


def test_decode_raw_yuv422_byte_orders():
    if not hasattr(cv2, "COLOR_RGB2YUV_UYVY"):
        pytest.skip("this opencv cannot encode UYVY")
    img = cv2.GaussianBlur(rgb_image(5, 16, 16), (5, 5), 0)  # smooth: chroma subsampling loses little
    uyvy = cv2.cvtColor(img, cv2.COLOR_RGB2YUV_UYVY).reshape(16, -1)
    yuyv = uyvy.reshape(16, -1, 2)[:, :, ::-1].reshape(16, -1)  # U Y V Y -> Y U Y V
    a = decode_raw(uyvy, height=16, width=16, encoding="yuv422", where="x")
    b = decode_raw(uyvy, height=16, width=16, encoding="UYVY", where="x")
    c = decode_raw(yuyv, height=16, width=16, encoding="yuyv", where="x")
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert np.abs(a.astype(int) - img).mean() < 10
    with pytest.raises(ImageSourceError, match="even width"):
        decode_raw(uyvy, height=16, width=15, encoding="yuv422", where="x")


@pytest.mark.parametrize("pattern", ["rggb", "bggr", "gbrg", "grbg"])
def test_decode_raw_bayer_patterns(pattern):
    colour = {"r": 200, "g": 100, "b": 50}
    mosaic = np.zeros((8, 8), np.uint8)
    for k, ch in enumerate(pattern):
        mosaic[k // 2 :: 2, k % 2 :: 2] = colour[ch]
    out = decode_raw(mosaic, height=8, width=8, encoding=f"bayer_{pattern}8", where="x")
    assert out[2:6, 2:6].reshape(-1, 3).tolist() == [[200, 100, 50]] * 16


def test_decode_raw_checks_sizes():
    data = np.zeros(2 * 5 * 3, np.uint8)
    assert decode_raw(data, height=2, width=5, encoding="rgb8", where="x").shape == (2, 5, 3)
    with pytest.raises(ImageSourceError, match="x: truncated image data"):
        decode_raw(data[:-1], height=2, width=5, encoding="rgb8", where="x")
    with pytest.raises(ImageSourceError, match="step 10 is shorter"):
        decode_raw(data, height=2, width=5, encoding="rgb8", step=10, where="x")
    with pytest.raises(ImageSourceError, match="empty image"):
        decode_raw(data, height=0, width=5, encoding="rgb8", where="x")
    with pytest.raises(ImageSourceError, match="compressed depth map"):
        decode_compressed(b"\x89PNG", "16UC1; compressedDepth", "x")
    assert {"rgb8", "bgr8", "mono8", "rgba8", "bgra8", "yuv422"} <= set(RAW_ENCODINGS)
