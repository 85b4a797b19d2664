"""One prompt's rounds straight from the round loop, with no session around them: for tests of a
backend's or a drafter's round bookkeeping (the product decodes through SessionDriver)."""

from specmon.engine.rounds import drain, prompt_rounds


def decode_prompt(*args):
    """prompt_rounds(target, drafter, tokens, draft_len, sampling, max_new_tokens, ctx, emit[, stop]) to its end."""
    return drain(prompt_rounds(*args))


def assert_proposals_follow_the_draft(events, prompt, next_token, k: int) -> None:
    """Each round proposed what the draft gives on the true context (prompt and every token emitted
    before it): no stale position in the draft's cache."""
    context = list(prompt)
    for event in events:
        expected = []
        for _ in range(k):
            expected.append(next_token(context + expected))
        assert event.proposed == expected
        context += event.emitted
