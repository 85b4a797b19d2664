"""A draft the class's table cuts whole is still evidence (policy.gate.Shadow): the tokens the
target emits instead say how much of it a verify pass would have accepted, so a class cut to plain
steps learns, at no cost, that its prompts have started to copy; explain reads the same evidence
from the log."""

import msgspec
import numpy as np

from specmon.engine.prompts import Prompt
from specmon.events.schema import Decision, RoundVerified, Sampling
from specmon.policy import gate
from specmon.policy.explain import explain_log
from specmon.policy.schema import parse_policy
import test_policy
from test_policy import DRAFT, EOS, ONE_CLASS, TEXTS, ScriptedTarget, engine_at
from test_recall import write_log
from events import round_verified

session = test_policy.session  # the fixture: a scripted policy session per call

# each verified position costs 0.6 of a plain step: the prior's drafts after 2-token matches do not pay
DEAR = engine_at(1.6)


def rounds(*emitted, prompt_id="p", cut_at=()):
    """Rounds of one prompt after 2-token matches: each emits the tokens given; those in `cut_at`
    had their 3-token draft cut whole."""
    return [
        round_verified(
            round_id=i, prompt_id=prompt_id, emitted=list(e), matched=2, cut=[DRAFT] * 3 if i in cut_at else []
        )
        for i, e in enumerate(emitted)
    ]


def test_a_cut_draft_is_judged_by_the_tokens_emitted_after_it_one_at_a_time_per_prompt():
    shadows = gate.Shadows()
    # round 0's cut draft [d, d, d]: d, then d and d from a drafted round: all three would have been accepted
    settled = [shadows.settle(ev) for ev in rounds([DRAFT], [DRAFT, DRAFT, EOS], cut_at=(0, 1))]
    assert settled == [None, gate.Draft(0, "chat", proposed=3, accepted=3, matched=2)]
    # the second cut draft (round 1) came while the first was being checked: not taken, so no position counts twice
    wrong = [shadows.settle(ev) for ev in rounds([DRAFT], [EOS], cut_at=(0,))]
    assert wrong == [None, gate.Draft(0, "chat", proposed=3, accepted=1, matched=2)]  # rejected at its second
    first = rounds([EOS], cut_at=(0,))[0]
    assert shadows.settle(first) == gate.Draft(0, "chat", 3, 0, 2)  # the emitted token is not the draft's
    # a prompt finished while its shadow still matched: the positions judged count, all accepted
    shadows.settle(rounds([DRAFT], cut_at=(0,), prompt_id="q")[0])
    assert shadows.close("q") == gate.Draft(0, "chat", proposed=1, accepted=1, matched=2)
    # a verified draft takes over the positions the shadow had not reached: none counts twice
    cut, drafted = rounds([DRAFT], [DRAFT, DRAFT], cut_at=(0,))
    drafted = msgspec.structs.replace(drafted, proposed=[DRAFT, DRAFT], accepted=1)
    assert shadows.settle(cut) is None and shadows.settle(drafted) == gate.Draft(0, "chat", 1, 1, 2)
    shadows.settle(rounds([DRAFT], cut_at=(0,), prompt_id="r")[0])
    shadows.drop("r")  # a decode that raised (no PromptFinished): its shadow is no evidence
    assert shadows.close("r") is None and not shadows.pending


class CopyTarget(ScriptedTarget):
    """A target that copies: every position's token is the one the repeat drafter proposes."""

    def forward(self, tokens, start) -> np.ndarray:
        self.round += 1
        logits = np.zeros((len(tokens), self.vocab_size))
        logits[:, DRAFT] = 1.0
        if self.round == self.rounds:
            logits[-1] = 0.0
            logits[-1, EOS] = 1.0
        self.clock.seconds += self.round_ms(len(tokens) - 1) / 1e3
        return logits


def test_a_class_cut_to_plain_steps_learns_from_its_cut_drafts_that_it_copies_and_explain_reproduces_it(
    session, tmp_path
):
    live = session(parse_policy(ONE_CLASS.format(mode="enforce", speculate="auto")), DEAR)
    live.target = live.scheduler.driver.target = CopyTarget(live.target.clock)
    assert gate.kept(live.engine.state("chat").table)[2] == 0  # (1 + 3/5) tokens for 1.6 steps: cut
    live.target.rounds = 80
    live.scheduler.decode(Prompt("p1", TEXTS["chat"], "default"), Sampling(), 1000)
    played = [e for e in live.events if isinstance(e, RoundVerified)]
    decisions = [e for e in live.events if isinstance(e, Decision)]
    # each cut draft of 8 settles after 8 plain steps, all accepted; CHECK_EVERY of them open the table
    opened = gate.CHECK_EVERY * 8
    assert [len(e.proposed) for e in played[:opened]] == [0] * opened
    assert [bool(e.cut) for e in played[:opened]] == [i % 8 == 0 for i in range(opened)]
    first = decisions[0]
    assert first.round_ids == [0, 8, 16, 24] and first.gate.kept_to[2] > 0 and first.gate.taken[2] == 4
    drafted = [e for e in played[opened:-1] if e.proposed]
    assert len(drafted) == len(played[opened:-1]) and all(e.accepted == len(e.proposed) for e in drafted)
    log = write_log(tmp_path / "s.specmon", live.events)
    explained = explain_log(log)
    assert explained and all(e.reproduces for e in explained), [e.detail for e in explained]
    # a cited cut draft altered (its tokens no longer what was emitted): explain says the decision no longer follows
    altered = [
        msgspec.structs.replace(e, cut=[EOS] * 8) if isinstance(e, RoundVerified) and e.round_id == 8 else e
        for e in live.events
    ]
    again = explain_log(write_log(tmp_path / "altered.specmon", altered))[0]
    assert not again.reproduces, again.detail
