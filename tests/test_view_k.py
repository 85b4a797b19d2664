"""The k a class's figures show is the k its rounds ran at. Under the gate a class's k in force is the
longest draft it verifies (ClassInForce.draft_len, 5 here), while its n-gram drafter is asked the
file's k (8) and every round carries 8: a live run under `--policy` once showed "no speculative round
yet" all session, with 92 rounds in the log (a new user's trial, 2026-12-04)."""

from decisions import gate_decision

from specmon.events.schema import ClassInForce, PolicyLoaded, PromptStarted, RoundVerified
from specmon.tui.state import ViewState
from events import policy_loaded, prompt_started, round_verified


def loaded(*classes: ClassInForce) -> PolicyLoaded:
    return policy_loaded(classes=list(classes))


def prompt(name: str, k: int, n: int = 0) -> PromptStarted:
    return prompt_started(prompt_id=f"{name}-{n}", prompt_class=name, draft_len=k, max_new_tokens=8)


def round_(name: str, k: int, i: int, proposed: int, accepted: int) -> RoundVerified:
    return round_verified(
        round_id=i,
        prompt_id=f"{name}-0",
        prompt_class=name,
        round_index=i,
        draft_len=k,
        proposed=list(range(proposed)),
        accepted=accepted,
        rejection_pos=None if accepted == proposed else accepted,
        emitted=list(range(accepted + 1)),
        draft_ms=0.1,
        overhead_ms=0.1,
        target_probs=[0.5] * proposed,
        margins=[1.0] * (accepted + 1),
        mem_bytes=1,
    )


def test_a_gated_class_shows_the_rounds_at_the_k_its_prompts_ask_for():
    state = ViewState()
    state.apply([loaded(ClassInForce("chat", True, 5, 2)), prompt("chat", 8)])
    state.apply([round_("chat", 8, i, proposed=4, accepted=2) for i in range(6)])
    assert state.current_class == "chat" and state.class_k == 8
    assert state.run_for("chat").rounds == 6 and len(state.window()) == 6
    state.apply([gate_decision("chat", 5, 3), round_("chat", 8, 6, proposed=3, accepted=3)])
    assert state.class_k == 8 and state.run_for("chat").rounds == 7  # the gate cuts drafts; k asked stays
    assert state.draft_len_by_class["chat"] == 3  # the longest draft verified, as the classes pane says


def test_a_k_set_outright_is_shown_from_the_reload_on():
    state = ViewState()
    state.apply([loaded(ClassInForce("rewrite", True, 4)), prompt("rewrite", 4)])
    state.apply([round_("rewrite", 4, i, proposed=4, accepted=4) for i in range(3)])
    state.apply([loaded(ClassInForce("rewrite", True, 2))])  # an edit: k = 2 from its next prompt
    assert state.class_k == 2 and state.run_for("rewrite") is None
