"""One prompt's rounds straight from the round loop, with no session around them: for tests of a
backend's or a drafter's round bookkeeping (the product decodes through SessionDriver)."""

from specmon.engine.rounds import drain, prompt_rounds


def decode_prompt(*args):
    """prompt_rounds(target, drafter, tokens, draft_len, sampling, max_new_tokens, ctx, emit[, stop]) to its end."""
    return drain(prompt_rounds(*args))
