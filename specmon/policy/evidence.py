"""The policy's evidence: each class's recent rounds, kept per k in bounded windows, and the
rounds set aside until a decision could come of them (see PolicyEngine.after_round)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable

from specmon.events.schema import RoundVerified
from specmon.policy.decide import ROUND_ID, Row, same_text, silent, switch_rows
from specmon.policy.plan import Schedule
from specmon.policy.schema import Policy

ADJACENT = {"adjacent": 1.0}  # every adjacent pair, capped or not: what a probe counts to be complete
EARLY_ROUNDS = 4  # rounds at a k before the optimistic early-off test, and the length of a first probe while off


@dataclass
class ClassState:
    speculate: bool
    k: int
    prompts: int = 0
    windows: dict[int, collections.deque] = field(default_factory=dict)  # k -> recent Rows
    remeasure_gap: int = 0  # prompts between plain re-measures; doubles while decisions hold
    since_plain: int = 0  # prompts since the last plain re-measure
    remeasuring: bool = False  # a plain re-measure is under way; the next decision judges it
    fresh: int = 0  # rounds observed since the last decision check
    probe_gap: int = 0  # prompts between probes (of k while off, of other k while on); doubles while they confirm
    since_probe: int = 0  # prompts since the last probe
    probing: bool = False  # a probe is under way; the next decision judges it
    probed: dict[int, int] = field(default_factory=dict)  # k -> prompt count when last probed
    silent_since: int = 0  # silent rounds (policy.silent_plain) since the last plain re-measure was due
    # round id -> the silent rounds in the windows, kept whatever the policy says: a reload that turns
    # silent_plain on counts them all as plain, as decide's by_draft_len does with the cited rounds
    silent: dict[int, Row] = field(default_factory=dict)
    min_match: int = 0  # the n-gram drafter's min_match as the policy raised it (0: the class's own)
    match_advised: int = 0  # the min_match last decided (applied or, in advise mode, only advised)


class Evidence:
    """The evidence half of PolicyEngine, which provides `policy`, `state` and `_class`."""

    policy: Policy

    def __init__(self, policy: Policy):
        # plain rounds of every class: with policy.interval, a class with too few of its own borrows
        # these (a plain step's cost depends on the machine and the context, not on what the text says)
        self.plain_pool: collections.deque = collections.deque(maxlen=policy.settings.evidence_window)
        self._pending: list[RoundVerified] = []  # rounds not yet observed: no decision can be due before they are
        # class -> rounds it may still set aside before its check could be due; kept from the round that
        # computed it (pending then 0), counted down by each round set aside, dropped at every flush
        self._room: dict[str, int] = {}
        self.epoch = 0  # bumped by every flush and by a room spent below 0: a grant (grant_quiet) holds within one

    def observe(self, ev: RoundVerified) -> None:
        st = self.state(ev.prompt_class)
        window = st.windows.get(ev.draft_len)
        if window is None:
            window = st.windows[ev.draft_len] = collections.deque(maxlen=self.policy.settings.evidence_window)
        if len(window) == window.maxlen:
            st.silent.pop(window[0].round_id, None)  # it leaves the window
        row = Row.of(ev)
        window.append(row)
        if not ev.draft_len:
            self.plain_pool.append(row)
        elif silent(row):
            st.silent[row.round_id] = row
            st.silent_since += self.policy.settings.silent_plain
        st.fresh += 1

    def plain_rows(self, st: ClassState) -> list[Row]:
        """The class's plain evidence: its plain rounds (or the session's) and, with
        policy.silent_plain, its silent rounds, which a decision counts as plain too."""
        if not self.policy.settings.silent_plain:
            return self.plain_decoded(st)
        return self.plain_decoded(st) + list(st.silent.values())

    def plain_decoded(self, st: ClassState) -> list[Row]:
        """The class's plain rounds; with policy.interval, while its plain evidence is short of
        plain_rounds, the session's (every class's), so a new class need not start with a plain run."""
        own, s = list(st.windows.get(0, ())), self.policy.settings
        if not s.interval or len(own) + (len(st.silent) if s.silent_plain else 0) >= s.plain_rounds:
            return own
        return list(self.plain_pool)

    def flush(self) -> None:
        """Observe the rounds set aside, in order (see after_round)."""
        pending = self._pending[:]
        self._pending.clear()  # the same list: a round hook may hold its append
        self._room.clear()
        self.epoch += 1
        for ev in pending:
            self.observe(ev)

    def set_aside(self) -> Callable[[RoundVerified], None]:
        """What a granted quiet round (grant_quiet) needs done: kept to be observed at the next flush."""
        return self._pending.append

    def grant_quiet(self, name: str, schedule: Schedule) -> tuple[int, bool]:
        """How many of this prompt's next rounds are surely quiet (_quiet would say so), taken from
        the class's room at once, and whether that holds for a round that drafts: not while the
        prompt's own first drafting rounds are to be judged (a round that drafts nothing is still
        quiet then). A grant holds until the next flush or until the room runs out under another
        prompt of the class (self.epoch). A round hook can then set those rounds aside without
        asking: between forward passes every call and attribute read costs cache misses."""
        lead_left = max(0, schedule.lead_rounds - 1 - schedule.rounds)  # rounds before the lead's last
        room = self._room_left(name)
        granted = max(lead_left, room)
        if granted:
            self._spend_room(name, room, granted)
        return granted, not (self._watching(schedule) and self._class(name).speculate == "auto")

    def _watching(self, schedule: Schedule) -> bool:
        """This prompt's own first rounds are still being gathered (policy.prompt_rounds)."""
        return bool(self.policy.settings.prompt_rounds) and not schedule.judged

    def _quiet(self, ev: RoundVerified, schedule: Schedule) -> bool:
        """No decision can come of this round, even once every round set aside is observed: the
        prompt's own evidence is judged (or this round is not part of it), and the class's check is
        not yet due. A round in a lead run is quiet whatever the class's room (a probe is judged
        whole), and uses it up as well, since observed it counts as fresh."""
        if (ev.draft_len and ev.proposed and self._watching(schedule) and schedule.lead_over()
                and self._class(ev.prompt_class).speculate == "auto"):
            return False
        name = ev.prompt_class
        room = self._room_left(name)
        self._spend_room(name, room, 1)
        return room > 0 or not schedule.lead_over()

    def _room_left(self, name: str) -> int:
        """The class's room now: as counted down since the last flush, else computed afresh."""
        room = self._room.get(name)
        return self._room_now(name) if room is None else room

    def _spend_room(self, name: str, room: int, rounds: int) -> None:
        """A lead run can spend past the room: then any grant another prompt of the class holds is
        void (a new epoch), since its check may now come due within it."""
        self._room[name] = room - rounds
        if room - rounds < 0:
            self.epoch += 1

    def _room_now(self, name: str) -> int:
        """Rounds the class may set aside, with none pending, before its check could be due. Due
        comes at fresh >= EARLY_ROUNDS in a class's early phase, else plain_rounds; the rounds set
        aside can take it out of that phase (never into it), so while it reads early the lower of
        the two lines holds."""
        st, s = self.state(name), self.policy.settings
        early = st.speculate and self._rounds(st, st.k) <= s.min_rounds
        return (min(EARLY_ROUNDS, s.plain_rounds) if early else s.plain_rounds) - st.fresh - 1

    def _grouped(self, st: ClassState) -> dict[int, list[Row]]:
        """The class's evidence as decide() groups it (decide.by_draft_len), built from the windows:
        each k's window, and under 0 the plain rounds with (silent_plain) the silent ones."""
        by_k = {k: sorted(window, key=ROUND_ID) for k, window in st.windows.items() if k and window}
        plain = sorted(self.plain_rows(st), key=ROUND_ID)
        if plain:
            by_k[0] = plain
        return by_k

    def _switch_rows(self, st: ClassState, k: int) -> list[Row]:
        """k's rounds as a switch judges them (decide.switch_rows): the engine logs switch_drafted
        whenever policy.silent_plain is on."""
        return switch_rows(st.windows.get(k, ()), self.policy.settings.silent_plain)

    @staticmethod
    def _rounds(st: ClassState, k: int) -> int:
        return len(st.windows.get(k, ()))

    @staticmethod
    def _paired(st: ClassState, k: int) -> tuple[int, int]:
        """k's rounds paired with the round at the class's k after them (decide.same_text, adjacent),
        and those that can no longer be: older than the class's k's window, so their partner left it.
        Every pair counts here, capped or not: a probe is complete at min_rounds pairs, though a move
        compares only the capped ones (a class whose drafts rarely reach k would else probe on and on)."""
        theirs, mine = st.windows.get(k), st.windows.get(st.k)
        if not theirs or k == st.k:
            return len(theirs or ()), 0
        if not mine:
            return 0, len(theirs)
        oldest = mine[0].round_id
        return len(same_text(list(theirs), list(mine), st.k, ADJACENT)[0]), sum(r.round_id < oldest for r in theirs)
