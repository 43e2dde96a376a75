"""Search for inputs that matter: coverage-guided and evolutionary search on the shared campaign engine.

* :mod:`lidarmt.search.es` — the (1+1)-ES with TACTIC's 1/5 success rule and stopping rule, and the
  random-search baseline, over a unit box (:class:`~lidarmt.search.es.Space`);
* :mod:`lidarmt.search.camera` — DeepTest's Algorithm 1 (coverage-guided greedy search over two composed
  transformations) and TACTIC's ES over a transformation's continuous space, for steering models (campaign kind
  ``camera-search``; ``lidarmt camera search``);
* :mod:`lidarmt.search.lidar` — critical noise conditions for MR1: the ES and random search over the injector's
  parameters (:class:`~lidarmt.lidar.mr1.inject.NoiseCondition`), validated on held-back frames against the study's
  uniform noise (campaign kind ``lidar-search``; ``lidarmt fuzz --search es``).

Every search is a campaign: its items are search steps (or seeds), its journal records every evaluated
candidate, ``--resume`` folds the journal back into the search state, and its reports and bundles are written
the one way every campaign writes them.
"""
