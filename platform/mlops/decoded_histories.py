"""The histories a process decoded last, kept with the stored text each was decoded from.

Every request reads its entities' histories from the online store as JSON text and, before this,
decoded each whole (a sixth of a /predict, docs/performance.md). Most reads find the text the
process itself wrote or read a moment ago: a busy merchant's history changes with each of its
requests, and this worker wrote most of them. The memo answers a read whose text equals the kept
text with the kept History; any other text (another worker, a replica, materialize wrote it) is
decoded and replaces it. So it is exact whoever writes the store: the answer is a function of
the text alone, and the text is compared whole. Only histories of at least ``min_events`` are kept
(a card's few events decode in microseconds; a merchant's hundreds are what a decode costs, and a
History's own objects would cost more memory than its events), bounded by the events held, least
recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from mlops.contract import FeatureViewSpec
from mlops.histories import History, decode_history

# About 500 bytes per kept event, its first answer and its share of the stored text included (the
# serving benchmark: 26 MB more resident at 50,000): 20,000 events cost ~10 MB of the service's 200 MB.
DEFAULT_MAX_EVENTS = 20_000
DEFAULT_MIN_EVENTS = 8


class DecodedHistories:
    """``decode`` is :func:`mlops.histories.decode_history` with a memo per (view, entity); thread-safe."""

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS, min_events: int = DEFAULT_MIN_EVENTS) -> None:
        self.max_events, self.min_events = max_events, min_events
        self._entries: OrderedDict[tuple[str, str], tuple[str, History]] = OrderedDict()
        self._events = 0
        self._lock = threading.Lock()

    @property
    def events(self) -> int:
        """The events the kept histories hold together."""
        return self._events

    def __len__(self) -> int:
        return len(self._entries)

    def decode(self, view: FeatureViewSpec, entity: str, stored: object) -> History:
        """The history ``stored`` (the online value of ``entity`` in ``view``) decodes to."""
        if not isinstance(stored, str):  # no history (None, NaN) or a value decode_history refuses
            return decode_history(view, stored)
        key = (view.view_name, entity)
        with self._lock:
            kept = self._entries.get(key)
            if kept is not None and kept[0] == stored:
                self._entries.move_to_end(key)
                return kept[1]
        history = decode_history(view, stored)
        self.keep(view, entity, stored, history)
        return history

    def keep(self, view: FeatureViewSpec, entity: str, stored: str, history: History) -> None:
        """Remember that ``stored`` decodes to ``history`` (the caller encoded it, or decoded it)."""
        key = (view.view_name, entity)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._events -= len(old[1])
            if not self.min_events <= len(history) <= self.max_events:
                return
            self._entries[key] = (stored, history)
            self._events += len(history)
            while self._events > self.max_events:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._events -= len(evicted)
