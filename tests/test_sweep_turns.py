"""`specmon sweep` decodes a prompt's cells side by side, round by round, on forked KV caches:
each cell gives what it gives alone, the log keeps each decode's events together, and a drafter
that cannot be copied makes the sweep decode one cell after another, as before."""

import pytest

from specmon.backends.loader import load_pair
from specmon.backends.profiles import DrafterSpec, ModelRef, load_profile
from specmon.engine.draft_len import FixedDraftLen
from specmon.engine.drafters import NgramDrafter
from specmon.engine.prompts import builtin_suite
from specmon.events.schema import PromptFinished, PromptStarted, RoundVerified, Sampling
from specmon.sched import sweep as sweep_module
from specmon.sched.sweep import _lanes, grid, run_sweep
from specmon.transport.session import live_session
from tinymodel import tiny_profile

SAMPLINGS = [Sampling(), Sampling(temperature=0.9, seed=3)]  # sampled texts differ by k: shared caches would clash


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep-turns")
    profile = load_profile(str(tiny_profile(tmp)))
    pair = load_pair(profile, DrafterSpec(kind="none"))
    # a draft model (the target cut to 1 layer) proposes every round, so under sampling k changes the text
    drafters = {
        "model": pair.make_drafter(DrafterSpec(kind="model", target=ModelRef(path=str(tmp / "tiny.gguf"), layers=1)))
    }
    cells = grid(["model"], [0, 2, 4], SAMPLINGS)
    prompts = builtin_suite(["rewrite", "chat"])[:3]
    with live_session(pair, profile, tmp / "sweep.specmon", serve=False, announce=False) as session:
        assert _lanes(session.driver, {**drafters, "none": pair.drafter}, cells) is not None
        told = []
        run_sweep(session.driver, drafters, prompts, cells, 16, told.append)
        events = list(session.events)
        alone = {
            (p.id, c): session.driver.decode(
                p, drafters.get(c.drafter, pair.drafter), FixedDraftLen(c.draft_len), c.sampling, 16
            ).run.generated
            for p in prompts
            for c in cells
        }
    assert told == [len(cells) * n for n in (1, 2, 3)]  # a prompt's cells finish together
    return events, alone, cells, pair


def decodes(events):
    """Each decode: its PromptStarted, its rounds and its PromptFinished, as the log orders them."""
    runs = []
    for ev in events:
        if isinstance(ev, PromptStarted):
            runs.append([ev, [], None])
        elif isinstance(ev, RoundVerified):
            runs[-1][1].append(ev)
        elif isinstance(ev, PromptFinished):
            runs[-1][2] = ev
    return runs


def test_every_cell_gives_what_it_gives_alone(swept):
    events, alone, cells, _ = swept
    got = {}
    for started, rounds, finished in decodes(events)[: 3 * len(cells)]:
        cell = next(c for c in cells if (c.draft_len, c.sampling) == (started.draft_len, started.sampling))
        assert finished.prompt_id == started.prompt_id and all(r.prompt_id == started.prompt_id for r in rounds)
        got[started.prompt_id, cell] = finished.generated
    assert got == alone
    sampled = [(p, c) for p, c in alone if not c.sampling.greedy]
    assert any(
        alone[p, c] != alone[p, next(o for o in cells if o.sampling == c.sampling and o.draft_len == 4)]
        for p, c in sampled
        if c.draft_len == 0
    )  # the check has teeth


def test_side_by_side_cells_are_judged_against_their_own_plain_cell(swept):
    events, _, _, _ = swept
    started = {}
    for ev in events:
        if isinstance(ev, PromptStarted):
            started = ev
        elif isinstance(ev, PromptFinished):
            expected = (
                {"baseline"}
                if started.draft_len == 0
                else {"identical", "near-tie"}
                if started.sampling.greedy
                else {"sampled"}
            )
            assert ev.equivalence.verdict in expected, (started.draft_len, started.sampling, ev.equivalence)


def test_the_copies_must_fit_lane_bytes(swept, tmp_path, monkeypatch):
    _, _, cells, pair = swept
    profile = load_profile(str(tiny_profile(tmp_path)))
    monkeypatch.setattr(sweep_module, "LANE_BYTES", 1)
    told = []
    with live_session(pair, profile, tmp_path / "s.specmon", serve=False, announce=False) as session:
        assert _lanes(session.driver, {"none": pair.drafter, "model": pair.drafter}, cells) is None
        run_sweep(session.driver, {"model": NgramDrafter()}, builtin_suite(["rewrite"])[:1], cells, 8, told.append)
    assert told == list(range(1, len(cells) + 1))  # one after another: told after each run


def test_a_prompts_cells_take_turns_and_the_log_keeps_each_together(swept):
    events, _, cells, _ = swept
    first = decodes(events)[: len(cells)]  # the first prompt's decodes
    assert len({s.prompt_id for s, _, _ in first}) == 1
    for _, rounds, _ in first:
        assert [r.round_index for r in rounds] == list(range(len(rounds)))
    spans = [(rounds[0].round_id, rounds[-1].round_id) for _, rounds, _ in first]
    assert all(lo < other_hi and other_lo < hi for lo, hi in spans for other_lo, other_hi in spans)


def test_a_drafter_that_cannot_be_copied_decodes_cells_one_after_another(swept, tmp_path):
    _, _, cells, pair = swept

    class Uncopyable(NgramDrafter):
        fork = None

    profile = load_profile(str(tiny_profile(tmp_path)))
    with live_session(pair, profile, tmp_path / "s.specmon", serve=False, announce=False) as session:
        assert _lanes(session.driver, {"model": Uncopyable(), "none": pair.drafter}, cells) is None
        run_sweep(session.driver, {"model": Uncopyable()}, builtin_suite(["rewrite"])[:1], cells, 8)
        runs = decodes(session.events)
    spans = [(rounds[0].round_id, rounds[-1].round_id) for _, rounds, _ in runs]
    assert len(runs) == len(cells) and all(hi < lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
