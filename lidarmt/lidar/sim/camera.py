"""A front camera on the ego vehicle, rendered by casting one ray per pixel into the same scene as the LiDAR.

Pinhole, 640x480, focal length 520 px (about 63 deg horizontal field of view, like a 6 mm lens on a 1/3" chip),
mounted 1.6 m above the road and 1.5 m ahead of the LiDAR, pitched 4 deg down. Shading is simple: each
surface's colour (asphalt, lane paint, sidewalk, grass, buildings, vehicle paint, clothes...) lit by a sun
(Lambert) plus ambient light, a sky gradient where rays hit nothing, and a light haze with distance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import lidarmt.lidar.sim.geom as geom

_SUN = np.array([0.35, -0.45, 0.82])
_SUN = _SUN / np.linalg.norm(_SUN)


@dataclass(frozen=True, slots=True)
class Camera:
    width: int = 640
    height: int = 480
    focal: float = 520.0
    forward: float = 1.5  # metres ahead of the LiDAR
    mount_height: float = 1.6  # metres above the road
    pitch_deg: float = 4.0  # downwards

    def ray_directions(self) -> np.ndarray:
        """Unit ray directions (H*W, 3) in the vehicle frame (x forward, y left, z up), row-major from the top."""
        u = np.arange(self.width) + 0.5 - self.width / 2
        v = np.arange(self.height) + 0.5 - self.height / 2
        uu, vv = np.meshgrid(u, v)
        d = np.stack([np.full(uu.shape, self.focal), -uu, -vv], axis=-1).reshape(-1, 3)
        d = d @ geom.rot_y(np.radians(self.pitch_deg)).T
        return d / np.linalg.norm(d, axis=1, keepdims=True)

    def extrinsic(self, sensor_height: float) -> np.ndarray:
        """4x4 camera <- LiDAR (camera axes x right, y down, z forward, as KITTI's and OpenCV's) for a LiDAR
        ``sensor_height`` metres above the road: the camera sits ``forward`` ahead of it at ``mount_height`` above
        the road, pitched down by ``pitch_deg`` (the rays :meth:`ray_directions` casts)."""
        lidar_from_cam = geom.rot_y(np.radians(self.pitch_deg)) @ np.array(
            [[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
        centre = np.array([self.forward, 0.0, self.mount_height - sensor_height])
        out = np.eye(4)
        out[:3, :3] = lidar_from_cam.T
        out[:3, 3] = -lidar_from_cam.T @ centre
        return out

    def intrinsic(self) -> np.ndarray:
        """3x4 pixels <- camera: focal length ``focal``, principal point at the image's centre (pixel k spans
        [k, k + 1), as :meth:`ray_directions` casts through k + 0.5)."""
        return np.array([[self.focal, 0.0, self.width / 2, 0.0], [0.0, self.focal, self.height / 2, 0.0],
                         [0.0, 0.0, 1.0, 0.0]])

    def render(self, drive, k: int) -> np.ndarray:
        """The (H, W, 3) uint8 RGB image at the end of sweep ``k`` of a :class:`lidarmt.lidar.sim.drive.Drive`."""
        t = (k + 1) / drive.sensor.rate_hz
        pose = drive.sensor_pose_local(t)
        yaw = np.arctan2(pose[1, 0], pose[0, 0])
        rot = geom.rot_z(yaw)
        origin = pose[:3, 3].copy()
        origin[:2] += rot[:2, 0] * self.forward
        origin[2] = self.mount_height
        d0 = self.ray_directions()
        dirs = np.stack([d0[:, 0] * rot[j, 0] + d0[:, 1] * rot[j, 1] + d0[:, 2] * rot[j, 2] for j in range(3)],
                        axis=1).astype(np.float32)
        dyn, _ = drive.scene.agent_meshes(t, origin[:2], 200.0)
        hits = drive.caster.cast(origin, dirs, dyn, max_range=400.0, with_rgb=True, with_normal=True)
        hit = np.isfinite(hits.t)
        col = np.zeros((len(dirs), 3), np.float32)
        # sky: pale at the horizon, deeper blue above
        up = np.clip(dirs[:, 2], 0, 1)[:, None]
        sky = (1 - up) * np.array([200, 215, 235]) + up * np.array([90, 140, 210])
        col[~hit] = sky[~hit]
        n = hits.normal[hit]
        d = dirs[hit]
        flip = np.einsum("ij,ij->i", n, d) > 0
        n[flip] = -n[flip]
        lambert = np.clip(n @ _SUN, 0, 1)
        shade = 0.45 + 0.55 * lambert
        base = hits.rgb[hit].astype(np.float32)
        c = base * shade[:, None]
        haze = 1 - np.exp(-hits.t[hit] / 350.0)
        col[hit] = c * (1 - haze[:, None]) + np.array([200, 210, 225]) * haze[:, None]
        return np.clip(col, 0, 255).astype(np.uint8).reshape(self.height, self.width, 3)
