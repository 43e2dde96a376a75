"""The campaign engine both halves run on (ARCHITECTURE.md, "engine").

A relation plugs in through its configuration object (items, keys, evaluator, tally, bundle id); the engine owns
the run folder and its lock, the journal and resume, the pool of workers (processes or Ray actors) with per-call
limits, delta debugging, the trust gate, what every bundle replay shares, and the report set every run writes:
:mod:`~lidarmt.engine.campaign`, :mod:`~lidarmt.engine.journal`, :mod:`~lidarmt.engine.tally`,
:mod:`~lidarmt.engine.ray_backend`, :mod:`~lidarmt.engine.ddmin`, :mod:`~lidarmt.engine.trust`,
:mod:`~lidarmt.engine.replay`, :mod:`~lidarmt.engine.manifest`, :mod:`~lidarmt.engine.report`,
:mod:`~lidarmt.engine.html`, :mod:`~lidarmt.engine.mcap`. It imports nothing of either half.
"""
