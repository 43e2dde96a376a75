"""Messages (issue 29, item 10): a refused Ray token is one line naming the token (Ray's C++ retries kept off the
terminal), a refused pickle is lidarmt's line only (no torch warning before it), and a full disk during
``camera train`` names the command that continues (``--resume``), not one that is then refused."""

from __future__ import annotations

import os
import pickle

import pytest

from lidarmt.cli import main


def test_a_refused_ray_token_is_one_line_naming_the_token(monkeypatch, capfd):
    ray = pytest.importorskip("ray")
    import lidarmt.engine.ray_backend as rb
    from lidarmt.engine.errors import FuzzInputError

    line = ("[2026-11-28 10:23:34,684 W 27756 27756] gcs_client.cc:210: Failed to get cluster ID from GCS server: "
            "Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect\n")

    def init(**kw):  # what Ray 2.60 does against a token cluster: C++ warnings on fd 2, then a bare error
        for _ in range(20):
            os.write(2, line.encode())
        raise ConnectionError("Failed to connect to Ray cluster at 192.0.2.2:26380")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(rb, "_probe", lambda address: None)
    with pytest.raises(FuzzInputError) as info:
        rb.connect("192.0.2.2:26380")
    msg = str(info.value)
    assert "token" in msg and "RAY_AUTH_TOKEN" in msg and "InvalidAuthToken" in msg and "\n" not in msg
    assert "ray start --head" not in msg
    out, err = capfd.readouterr()
    assert "gcs_client" not in err and "gcs_client" not in out


def test_a_refused_pickle_prints_only_lidarmts_line(tmp_path, capsys):
    class Code:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    evil = tmp_path / "evil.pt"
    evil.write_bytes(pickle.dumps({"format": "lidarmt-steering", "x": Code()}, protocol=4))
    assert main(["camera", "models", str(evil)]) == 2
    captured = capsys.readouterr()
    assert "pwned" not in captured.out
    assert "Detected pickle protocol" not in captured.err and "file an issue" not in captured.err
    assert captured.err.count("\n") == 1 and captured.err.startswith("lidarmt: error: ")
    from lidarmt.lidar.perception.apollo.network import WeightsError, read_torch_file

    with _no_warnings(), pytest.raises(WeightsError):
        read_torch_file(evil)


class _no_warnings:
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings(record=True)
        self.log = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        assert not [w for w in self.log if "pickle" in str(w.message)], [str(w.message) for w in self.log]
        return False


def test_a_full_disk_in_camera_train_names_resume(tmp_path, monkeypatch, capsys):
    from test_camera_predict_cli import udacity_folder

    import lidarmt.camera.models.train as T
    from lidarmt.errors import OutputError

    data = udacity_folder(tmp_path / "drive")
    out = tmp_path / "run"

    def full(cfg, **kw):  # the run folder is made, then the disk fills while a checkpoint is written
        out.mkdir()
        (out / "log.jsonl").write_text("{}\n")
        raise OutputError(f"cannot write {out / 'checkpoint.pt'}: no space left on the device (RuntimeError); "
                          "free some space and run the command again")

    monkeypatch.setattr(T, "train", full)
    assert main(["camera", "train", "--arch", "dave2", "--data", str(data), "--out", str(out), "--epochs", "1"]) == 2
    (err,) = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lidarmt: error: ")]
    assert "--resume" in err and "run the command again" not in err
    T.check_out(out, force=False, resume=True)  # the command it names is not refused
    with pytest.raises(OutputError, match="--force or --resume|--resume"):
        T.check_out(out, force=False, resume=False)
