"""A class that ran at several k (a policy edit, a policy's shorter drafts, a served class whose k
changed) keeps every k in the per-class tables and the JSON: a row per (class, k) that ran rounds,
k = 0 (plain decoding) its own row, so the rows add up to all the class's rounds."""

from __future__ import annotations

import json

from specmon.cli.main import main
from specmon.events.log import LogWriter, read_log
from specmon.events.schema import RoundVerified
from specmon.metrics.stats import class_stats, summary
from tables_text import printed_rows
from events import prompt_started, round_verified

# (class, k, prompts, rounds a prompt, accepted a round): chat plain, then at k=4, then edited to k=2
PLAN = [("chat", 0, 2, 6, 0), ("chat", 4, 3, 8, 2), ("chat", 2, 2, 5, 1), ("code", 3, 1, 7, 3)]


def several_k_events(t0: float = 1_700_000_000.0) -> list:
    events, rid = [], 0
    for cls, k, prompts, rounds, accepted in PLAN:
        for p in range(prompts):
            prompt_id = f"{cls}-{k}-{p}"
            events.append(prompt_started(t=t0 + rid, prompt_id=prompt_id, prompt_class=cls, draft_len=k))
            for i in range(rounds):
                proposed = list(range(k - (i % 2))) if k else []  # odd rounds propose one short
                events.append(
                    round_verified(
                        t=t0 + rid,
                        round_id=rid,
                        prompt_id=prompt_id,
                        prompt_class=cls,
                        round_index=i,
                        draft_len=k,
                        proposed=proposed,
                        accepted=min(accepted, len(proposed)),
                        emitted=[5] * (min(accepted, len(proposed)) + 1),
                        draft_ms=0.1 * k,
                        verify_ms=20.0 + k,
                        overhead_ms=0.5,
                    )
                )
                rid += 1
    return events


def test_log_info_prints_a_row_per_class_and_k_whose_counts_add_up_to_the_class(tmp_path, capsys):
    log = tmp_path / "several-k.specmon"
    with LogWriter(log) as writer:
        for event in several_k_events():
            writer.write(event)
    assert main(["log", "info", str(log)]) == 0
    rows = printed_rows(capsys.readouterr().out)
    stats = class_stats(read_log(log))
    expected = {(name, str(k)): run for name, c in stats.items() for k, run in c.runs.items()}
    assert set(rows) == set(expected) == {("chat", "0"), ("chat", "2"), ("chat", "4"), ("code", "3")}
    for key, run in expected.items():
        assert [int(rows[key][col]) for col in ("rounds", "proposed", "accepted", "empty")] == [
            run.rounds,
            run.proposed,
            run.accepted,
            run.empty_rounds,
        ], key
        assert rows[key]["tok/s"] == f"{run.tok_per_s:.1f}", key
    for name, c in stats.items():
        printed = [row for (cls, _), row in rows.items() if cls == name]
        assert sum(int(row["rounds"]) for row in printed) == sum(r.rounds for r in c.runs.values()), name
    assert sum(int(row["rounds"]) for row in rows.values()) == sum(isinstance(e, RoundVerified) for e in read_log(log))
    plain = f"{stats['chat'].baseline.tok_per_s:.1f}"
    assert [rows[("chat", k)]["plain"] for k in ("0", "2", "4")] == [plain] * 3  # every k's plain side
    assert rows[("chat", "0")]["speedup"] == "-" and rows[("chat", "2")]["speedup"] != "-"


def test_the_json_keeps_the_class_keys_at_its_main_k_and_holds_every_k_beside_them():
    stats = class_stats(several_k_events())
    chat = json.loads(json.dumps(summary(stats)))["classes"]["chat"]
    assert chat["draft_len"] == 4 and chat["rounds"] == 24  # the k with the most rounds, as before
    assert list(chat["by_draft_len"]) == ["0", "2", "4"]
    assert {key: value for key, value in chat.items() if key != "by_draft_len"} == chat["by_draft_len"]["4"]
    for k, row in chat["by_draft_len"].items():
        run = stats["chat"].runs[int(k)]
        assert (row["draft_len"], row["rounds"], row["proposed"], row["accepted"], row["emitted"]) == (
            int(k),
            run.rounds,
            run.proposed,
            run.accepted,
            run.emitted,
        ), k
        assert row["speedup"] == (stats["chat"].speedup(int(k)) if int(k) else None), k
        assert row["baseline_tok_per_s"] == stats["chat"].baseline.tok_per_s
    assert list(json.loads(json.dumps(summary(stats)))["classes"]["code"]["by_draft_len"]) == ["3"]
