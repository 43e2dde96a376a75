"""The LiDAR half's own package (mirroring :mod:`lidarmt.camera`): physically based transformations of LiDAR
sweeps (:mod:`lidarmt.lidar.transforms`). Kept light: importing it imports nothing heavy."""
