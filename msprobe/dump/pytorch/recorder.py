"""What the module path (:mod:`.modules`) and the save path (:mod:`.debug_save`) may ask of the dump
service: the :class:`Recorder` protocol. :class:`~msprobe.dump.pytorch.service.TorchDumpService`
implements it; neither path sees the service or its session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from msprobe.dump.config import DumpConfig
    from msprobe.dump.filters import RecordFilter
    from msprobe.dump.naming import CallCounter
    from msprobe.dump.pytorch.encode import Encoder
    from msprobe.dump.writer import RankStore


@runtime_checkable
class Recorder(Protocol):
    config: DumpConfig
    counter: CallCounter
    """The per-step call counter of record names (``Module.x.Linear.forward.<n>``)."""
    filter: RecordFilter
    """scope/list: whether a record name is selected."""
    encoder: Encoder | None
    """Values -> dump.json objects for this step (None while no step folder is open)."""
    apis_on: bool
    """API calls are captured too (level L1 and mix)."""

    @property
    def store(self) -> RankStore | None:
        """The open rank folder's records, None while none is open."""
        ...

    @property
    def running(self) -> bool:
        """Dumping is on (between an effective ``start()`` and ``stop()``)."""
        ...

    def idle(self) -> bool:
        """Nothing is to be recorded now: dumping is off, or our own capture code is running."""
        ...

    lock: Any
    """Held while a record is made (hooks may run in autograd's threads); re-entrant."""

    def outermost_call_begins(self) -> None:
        """A module call begins with no recorded module call open (writes since the last one may
        have gone unseen)."""
        ...

    def foreign_thread(self) -> bool:
        """The calling thread is not the one that called ``start()``, nor one running a backward."""
        ...

    def enter(self) -> bool:
        """Our own capture code begins (calls inside record nothing); returns the state to restore."""
        ...

    def leave(self, was: bool) -> None:
        """Our capture code ends: the state :meth:`enter` returned."""
        ...

    def open_for_save(self) -> bool:
        """Level debug: this step's folder and encoder exist (False: this step or rank is not dumped)."""
        ...

    def record_error(self, function: str, name: str, exc: BaseException) -> None:
        """A record that could not be made: to dump_error_info.log and a warning."""
        ...
