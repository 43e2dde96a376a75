"""Steering models, the systems under test of the camera half: protocol, registry, Keras import, own models."""
