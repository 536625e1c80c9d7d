"""
The running configuration, in one place.

Every component that needs a setting reads it from the one
:class:`ConfigProvider` it was given, at the moment it needs it, instead of
keeping a copy of its own.  A reload swaps the provider's configuration once,
on the reactor thread, so every reader sees either the old or the new
configuration, never a mix, and none can be left behind with a stale copy.
"""

from __future__ import annotations

from pgstatus.config.settings import Config


class ConfigProvider:
    """
    Holds the configuration in force.

    :param config: the configuration at start.
    """

    __slots__ = ("_current",)

    def __init__(self, config: Config) -> None:
        self._current = config

    @property
    def current(self) -> Config:
        """
        The configuration in force now.
        """
        return self._current

    def swap(self, config: Config) -> Config:
        """
        Put ``config`` in force (a reload).

        :return: the configuration it replaces.
        """
        old, self._current = self._current, config
        return old
