"""Errors of the search layer (user-fixable ones derive from :mod:`lidarmt.errors`)."""

from __future__ import annotations

from lidarmt.errors import ArgumentError, InputError, LidarmtError


class SearchError(LidarmtError):
    """Base class of errors raised by lidarmt.search on purpose."""


class SearchArgumentError(ArgumentError, SearchError):
    """A search option is out of range or inconsistent (unknown strategy or space, a budget below 1, ...)."""


class SearchInputError(InputError, SearchError):
    """A search's journal cannot be continued (it was written by another search)."""
