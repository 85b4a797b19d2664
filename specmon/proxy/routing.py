"""Which side each proxied request goes to, decided per class by the policy (policy.route): with a
plain upstream beside the speculating one, a class goes where its measured goodput is higher and
the other side keeps `routing.explore_share` of it, interleaved, so a change in its traffic is seen.
Every move is a Decision citing the requests it came from. In advise mode the decisions are logged
and nothing moves: a fixed share (--plain-share) goes plain, as a baseline to compare with.

The policy file is the one `run` and `serve` read: its classes sort requests, `speculate = "on"` or
`"off"` pins a class to a side, and an edit is taken at the next request (hot reload).

Classes are judged on the servers' own decode time while both sides give it; from the first side that
does not (vLLM without --enable-per-request-metrics, say), every class and both sides on the proxy's clock
for the rest of the session, so a side that gives no decode time never leaves a class alternating.

With a memory shelf, earlier sessions' replies fill a class's windows (proxy.recall): a class they decide is
decided at once (`opening`), and every decision drawn partly from them cites them (RouteChoice.recalled)."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from specmon.events.schema import Decision, PolicyLoaded, RequestTimed, RouteChoice, StoredReply
from specmon.memory.store import Shelf
from specmon.metrics.format import ratio_interval
from specmon.metrics.served import CLOCK_WORDS, PROXY_CLOCK, timing
from specmon.policy import route
from specmon.policy.reload import Edit, PolicyWatch, loaded_event
from specmon.policy.route import BOTH, PLAIN, SPEC
from specmon.policy.schema import Policy
from specmon.proxy import recall


@dataclass
class ClassRoute:
    side: str = BOTH  # where the class goes (advised, in advise mode)
    sent: int = 0  # requests routed since the last decision: the interleave's count
    recent: dict[str, collections.deque] = field(default_factory=dict)  # side -> its last timed requests
    clocked: collections.Counter = field(default_factory=collections.Counter)  # side -> replies with decode ms
    unclocked: collections.Counter = field(default_factory=collections.Counter)  # side -> replies without
    stored: dict[str, list[StoredReply]] = field(default_factory=dict)  # side -> earlier sessions' (proxy.recall)


class Router:
    def __init__(
        self,
        policy: Policy,
        session_id: str,
        has_plain: bool,
        advise_share: float = 0.25,
        shelf: Shelf | None = None,
        families: dict[str, str] | None = None,  # side -> the family it named at start (proxy.recall)
    ):
        self.policy, self.session_id, self.has_plain = policy, session_id, has_plain
        self.advise_share = advise_share  # advise mode's fixed plain share, as before the policy routed
        self.classes: dict[str, ClassRoute] = {}
        self.decisions = 0
        self.watch = PolicyWatch(policy)
        self.memory = recall.Recollection(shelf, session_id, families)
        # what every class's sides are compared on: the proxy's clock once a side gave no decode ms, in
        # this session or (the same pair) as stored; the sides that gave none
        self.clock, self.clockless = self.memory.stored.clock, list(self.memory.stored.clockless)
        # a class whose stored replies decide it goes there before its first request
        held = [c.name for c in self.policy.classes if c.speculate == "auto" and c.name in self.memory.stored.classes]
        self.opening = [d for n in held if has_plain and (d := self._decide(n)) is not None]

    @property
    def enforced(self) -> bool:
        return self.policy.settings.mode == "enforce"

    def side(self, name: str) -> str:
        """The side this request of class `name` goes to."""
        if (pinned := self._pinned(name)) is not None:
            return pinned
        st = self._state(name)
        n, st.sent = st.sent, st.sent + 1
        if not self.enforced:
            return PLAIN if route.explore_to(SPEC, n, self.advise_share) else SPEC
        home = PLAIN if st.side == PLAIN else SPEC
        away = SPEC if home == PLAIN else PLAIN
        return away if route.explore_to(st.side, n, self.policy.routing.explore_share) else home

    def route_of(self, name: str) -> str:
        """Where the class goes now: pinned, or as routing moved it (both: learning); advised, spec (see `share`)."""
        pinned = self._pinned(name)
        if pinned is not None or not self.enforced:
            return pinned or SPEC
        st = self.classes.get(name)  # read only: a scrape asks it of every class
        return st.side if st is not None else BOTH

    def share(self, name: str) -> float:
        """The share of the class's requests that go plain now."""
        if (pinned := self._pinned(name)) is not None:
            return float(pinned == PLAIN)
        if not self.enforced:
            return self.advise_share
        explore = self.policy.routing.explore_share
        return {BOTH: 0.5, SPEC: explore, PLAIN: 1.0 - explore}[self.route_of(name)]

    def _pinned(self, name: str) -> str | None:
        """The side its `speculate` pins the class to (spec without a plain side); None where routing decides."""
        speculate = self.policy.class_named(name).speculate
        if not self.has_plain or speculate == "on":
            return SPEC
        return PLAIN if speculate == "off" else None

    def observe(self, ev: RequestTimed) -> list[Decision]:
        """Take a request's reply as evidence; a Decision for each class it moves (or, advised, would):
        its own, and any still alternating that the other classes' requests now send to one side."""
        found = timing(ev)  # on the server's clock where the reply gave its decode time, else the proxy's
        known = ev.prompt_class in {c.name for c in self.policy.classes}
        if ev.upstream not in (SPEC, PLAIN) or found is None or not known or self._pinned(ev.prompt_class) is not None:
            return []
        st = self._state(ev.prompt_class)
        (st.unclocked if found.clock == PROXY_CLOCK else st.clocked)[ev.upstream] += 1
        # one odd reply (its timings unreadable) is not a side that gives no decode time
        gives_none = st.clocked[ev.upstream] == 0 and st.unclocked[ev.upstream] >= UNCLOCKED_REPLIES
        if gives_none and ev.upstream not in self.clockless:
            # a side that gives no decode time gives it to no class: from now on every class's windows
            # hold both sides on the proxy's clock
            self.clock = PROXY_CLOCK
            self.clockless.append(ev.upstream)
        st.recent[ev.upstream].append(ev)
        others = [c.name for c in self.policy.classes if c.speculate == "auto" and c.name != ev.prompt_class]
        moved = [self._decide(ev.prompt_class)] + [self._decide(n) for n in others if self._state(n).side == BOTH]
        return [d for d in moved if d is not None]

    def _decide(self, name: str) -> Decision | None:
        r, st = self.policy.routing, self._state(name)
        kept, own = self._own(st)
        room = {side: r.min_requests - len(own[side]) - len(kept[side]) for side in (SPEC, PLAIN)}
        lent = {side: self._lent(name, side, room[side]) for side in (SPEC, PLAIN)}
        cited = {side: lent[side] + own[side] for side in (SPEC, PLAIN)}  # in this log: the decision names them
        spec, plain = (cited[side] + [route.stored_request(x, name) for x in kept[side]] for side in (SPEC, PLAIN))
        if min(len(spec), len(plain)) < r.min_requests // 2:
            return None  # route.choose moves nothing on so few: no bootstrap on every reply of a thin class
        est = route.estimate(spec, plain, self.clock)
        side_to = route.choose(st.side, est, r.min_requests)
        if side_to == st.side:
            return None
        key = "min_requests" if st.side == BOTH else "window"
        choice = RouteChoice(
            st.side,
            side_to,
            r.explore_share,
            est.ratio,
            est.low,
            est.high,
            len(spec),
            len(plain),
            r.min_requests,
            r.window,
            self.clock,
            len(lent[SPEC]) + len(lent[PLAIN]),
            kept[SPEC] + kept[PLAIN],
        )
        stored = route.stored_words(choice.recalled)
        st.side, st.sent = side_to, 0
        self.decisions += 1
        return Decision(
            session_id=self.session_id,
            t=time.time(),
            decision_id=self.decisions - 1,
            prompt_class=name,
            speculate_from=choice.side_from != PLAIN,
            speculate_to=side_to != PLAIN,
            k_from=0,
            k_to=0,
            rule_key=f"routing.{key}",
            rule_line=self.policy.line_of("routing", key),
            round_ids=[],
            applied=self.enforced,
            policy_sha256=self.policy.sha256,
            reason=_reason(choice, self.clockless, route.borrowed_words(name, spec + plain) + stored),
            request_ids=[ev.request_id for ev in cited[SPEC] + cited[PLAIN]],
            rule=choice,
        )

    def maybe_reload(self) -> PolicyLoaded | None:
        """If the file changed: a valid edit takes over from the next request, an invalid one is
        refused and reported. A class whose entry changed, or all of them when [policy] or [routing]
        did, starts again from BOTH (what was measured belonged to the old classes)."""
        edit = self.watch.edit(self.policy, self.session_id)
        if not isinstance(edit, Edit):
            return edit
        self.policy = edit.policy
        for name in list(self.classes) if edit.sections else edit.classes:
            self.classes.pop(name, None)
            self.memory.stored.classes.pop(name, None)  # measured under the class as it was
        return loaded_event(edit.policy, self.session_id, changed=edit.classes + edit.sections)

    def _state(self, name: str) -> ClassRoute:
        if name not in self.classes:
            recent = {side: collections.deque(maxlen=self.policy.routing.window) for side in (SPEC, PLAIN)}
            self.classes[name] = ClassRoute(recent=recent, stored=self.memory.replies(self.policy.class_named(name)))
        return self.classes[name]

    def _own(self, st: ClassRoute) -> tuple[dict[str, list[StoredReply]], dict[str, list[RequestTimed]]]:
        """A class's windows on its clock: the stored replies that fill what its own leave of each, and its own."""
        own = {side: [ev for ev in st.recent[side] if route.timed(ev, self.clock)] for side in (SPEC, PLAIN)}
        stored = {side: [r for r in st.stored.get(side, []) if r.clock == self.clock] for side in (SPEC, PLAIN)}
        room = {side: self.policy.routing.window - len(own[side]) for side in (SPEC, PLAIN)}  # the newest that fit
        return {side: stored[side][-room[side] :] if room[side] > 0 else [] for side in (SPEC, PLAIN)}, own

    def remember(self, final: bool = False) -> None:
        """Keep each class's windows of this session (proxy.recall) where due, and when it ends (`final`)."""
        if self.memory.shelf is None or not self.memory.shelf.due(final):
            return
        learned = {}
        for name, st in self.classes.items():
            if any(st.recent.values()):
                kept, own = self._own(st)
                mine = {side: [recall.stored_reply(ev, self.clock) for ev in own[side]] for side in (SPEC, PLAIN)}
                learned[name] = kept[SPEC] + mine[SPEC] + kept[PLAIN] + mine[PLAIN]
        self.memory.remember(learned, self.policy, self.clock, self.clockless)

    def _lent(self, name: str, side: str, need: int) -> list[RequestTimed]:
        """A thin class's window on `side` topped up to min_requests with the other classes' latest there."""
        if need <= 0:
            return []
        pooled = [ev for other, st in self.classes.items() if other != name for ev in st.recent[side]]
        return sorted((ev for ev in pooled if route.timed(ev, self.clock)), key=lambda ev: ev.t)[-need:]


UNCLOCKED_REPLIES = 2  # a side gives no decode time after this many replies without one and none with


def _reason(c: RouteChoice, clockless: list[str], borrowed: str) -> str:
    """The decision in words: where the class goes, over which requests, on which clock, and why."""
    sides = f"{c.spec_requests} spec vs {c.plain_requests} plain requests {borrowed}".rstrip()
    on = CLOCK_WORDS[c.clock]
    if c.clock == PROXY_CLOCK and clockless:
        on += f" ({' and '.join(sorted(clockless))} {'give' if len(clockless) > 1 else 'gives'} no decode time)"
    fewest = min(c.spec_requests, c.plain_requests)
    why = "the 95% interval excludes 1.0"
    if c.side_from == BOTH and fewest < c.min_requests:
        why = f"its 95% interval excludes 1.0 after {fewest} requests on each side"
    elif c.side_from == BOTH:
        why = f"higher measured goodput after {c.min_requests} requests on each side"
    return (
        f"{c.side_from} -> {c.side_to} ({c.explore_share:.0%} to the other side): "
        f"spec/plain {ratio_interval(c.ratio, c.low, c.high)} over {sides} on {on}; {why}"
    )
