"""What the proxy's routing learned in earlier sessions against the same upstream pair (memory.store):
each class's last timed replies per side, as the figures its estimate takes (StoredReply), and the
clock its sides were compared on.

The key is the upstream pair's URLs (a pool's in any order), nothing of this host: another pair's
replies are never read. The family each side named at start (/health or /v1/models) is kept with
them: a store whose side was another family (a different server now at that URL) is not read, but
a side that named none (still loading its model) reads what the same URLs taught. A class
whose match rules changed (policy.classify.matches_of) does not read what the old rules measured.

At start a class's stored replies fill its side windows ahead of other classes' loans, a week-old
store counting half; its own replies take their places as they come, and are kept as the session goes."""

from __future__ import annotations

import time

import msgspec

from specmon.events.schema import RequestTimed, StoredReply
from specmon.memory.store import Memory, Shelf, age_weight
from specmon.metrics.served import SERVER_CLOCK, timing
from specmon.policy.classify import matches_of
from specmon.policy.route import PLAIN, SPEC
from specmon.policy.schema import Policy, PromptClass

KIND = "routes"


class StoredClass(msgspec.Struct):
    """A class's replies as stored: each side's last timed ones, oldest first."""

    replies: list[StoredReply]
    session_id: str  # the session that wrote it (a reply names the session it was answered in)
    t: float  # when: the replies count less as it ages (memory.store.age_weight)
    matches: str  # the class's match rules (matches_of): replies to other prompts are not read


class StoredRoutes(msgspec.Struct):
    classes: dict[str, StoredClass]
    clock: str = SERVER_CLOCK  # the proxy's once a side gave no decode time: it will again
    clockless: list[str] = []  # the sides that gave none
    families: dict[str, str] = {}  # side -> the family it named ("" none yet)


def routes_shelf(memory: Memory | None, spec: list[str], plain: list[str]) -> Shelf | None:
    """The routing's place in `memory` for this pair of URLs; None without a memory or a plain side."""
    if memory is None or not plain:
        return None
    return Shelf(memory, KIND, {f"{SPEC}.url": " ".join(sorted(spec)), f"{PLAIN}.url": " ".join(sorted(plain))})


def stored_reply(ev: RequestTimed, clock: str) -> StoredReply:
    """A reply timed on `clock` as the store keeps it: its figures there."""
    found = timing(ev, clock)
    return StoredReply(ev.session_id, ev.request_id, ev.upstream, found.clock, found.tokens, found.ms)


class Recollection:
    """The routing's place in the store (None: nothing read or kept): what it recalled, and what it keeps."""

    def __init__(self, shelf: Shelf | None, session_id: str, families: dict[str, str] | None = None):
        self.shelf, self.session_id = shelf, session_id
        recalled = shelf.recall(StoredRoutes) if shelf is not None else None
        self.stored = recalled.body if recalled is not None else StoredRoutes({})
        now, was = families or {}, self.stored.families
        # a side whose server named another family than it names now (one of the two named none: agreed)
        side = next((s for s in (SPEC, PLAIN) if was.get(s) and now.get(s) and was[s] != now[s]), None)
        if side is not None:  # another server at the same URL: what the old one taught is not its goodput
            shelf.memory.warn(
                f"warning: the routing stored for {shelf.key[f'{side}.url']} is not used: it was measured on "
                f"{was[side]}, and {now[side]} answers there now"
            )
            self.stored = StoredRoutes({})
        # a side that named no family at start (loading) keeps the one the store knew
        self.families = {s: now.get(s) or self.stored.families.get(s, "") for s in (SPEC, PLAIN)}

    def replies(self, cls: PromptClass) -> dict[str, list[StoredReply]]:
        """A class's stored replies per side, oldest first, as its estimate may take them: none where its
        match rules changed; of each side's n, the newest round(n x age_weight)."""
        held = self.stored.classes.get(cls.name)
        if held is None or held.matches != matches_of(cls):
            return {}
        weight = age_weight(held.t)
        sides = {side: [r for r in held.replies if r.side == side] for side in (SPEC, PLAIN)}
        return {side: got[len(got) - round(len(got) * weight) :] for side, got in sides.items()}

    def remember(self, learned: dict[str, list[StoredReply]], policy: Policy, clock: str, clockless: list[str]) -> None:
        """Replace the stored replies of each class that `learned` some this session; the others stay."""
        if self.shelf is None or not learned:
            return
        now = time.time()
        fresh = {
            name: StoredClass(got, self.session_id, now, matches_of(policy.class_named(name)))
            for name, got in learned.items()
        }
        # what was recalled stays as read: a class made later must not take this session's replies as stored
        kept = StoredRoutes(self.stored.classes | fresh, clock, list(clockless), self.families)
        self.shelf.keep(self.session_id, kept)
