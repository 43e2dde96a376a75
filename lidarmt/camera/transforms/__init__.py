"""Image transformations (DeepTest's simple ones, composite weather, mirror): named, parameterised, deterministic."""
