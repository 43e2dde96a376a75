"""The LiDAR half (ARCHITECTURE.md, "lidar"): maps and ROI (:mod:`~lidarmt.lidar.roi`), the systems under test
(:mod:`~lidarmt.lidar.perception`, Apollo's obstacle perception among them), the simulator
(:mod:`~lidarmt.lidar.sim`), the study's MR1 relation (:mod:`~lidarmt.lidar.mr1`, its oracle in
:mod:`lidarmt.lidar.mr1.oracle`) and the relations beyond it over LiDAR transformations
(:mod:`~lidarmt.lidar.transforms`, :mod:`~lidarmt.lidar.relations`, :mod:`~lidarmt.lidar.campaign`). Kept light:
importing it imports nothing heavy."""
