"""Image sources: one reader per layout behind :func:`open_images`, which sniffs the path."""
