"""The classic group coordinator (``__consumer_offsets``), sans-IO.

``records`` is the log format, ``group`` the group state machine and its data, ``coordinator``
the :class:`GroupCoordinator` the broker's Trio shell drives (with ``membership`` and
``offsets`` holding its request handlers).
"""

from kcore.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from kcore.coordinator.group.group import ClassicGroup, GroupState, MemberMetadata

__all__ = ["ClassicGroup", "GroupConfig", "GroupCoordinator", "GroupState", "MemberMetadata"]
