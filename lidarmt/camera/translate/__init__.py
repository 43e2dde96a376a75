"""Learned image-to-image translation (UNIT, MUNIT) for weather transformations."""
