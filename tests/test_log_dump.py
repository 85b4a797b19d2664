"""`specmon log dump`: a log's events as JSON lines, fields by name, nested structs too; a damaged
log is written up to the damage and the damage is named."""

import json
import subprocess
import sys
from pathlib import Path

from specmon.events.log import LogWriter
from test_fields import SAMPLES

REPO = Path(__file__).resolve().parent.parent


def _dump(log: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specmon.cli", "log", "dump", str(log)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_event_is_one_json_object_a_line_with_its_type_and_fields_by_name(tmp_path):
    log = tmp_path / "all.specmon"
    with LogWriter(log) as writer:
        for event in SAMPLES:
            writer.write(event)
    done = _dump(log)
    assert done.returncode == 0 and done.stderr == ""
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["type"] for r in rows] == [type(e).__name__ for e in SAMPLES]
    for row, event in zip(rows, SAMPLES):
        assert list(row)[1:] == list(event.__struct_fields__)  # every field, by name, in the schema's order
    by_type = {r["type"]: r for r in rows}
    assert by_type["RoundVerified"]["proposed"] == [11, 12, 13, 14] and by_type["RoundVerified"]["accepted"] == 2
    assert by_type["RoundVerified"]["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 1234}
    assert by_type["PromptFinished"]["equivalence"]["verdict"] == "near-tie"
    assert by_type["PolicyLoaded"]["classes"] == [{"name": "chat", "speculate": True, "draft_len": 5, "min_match": 3}]


def test_a_damaged_log_is_dumped_up_to_the_damage_which_is_named(tmp_path):
    log = tmp_path / "cut.specmon"
    with LogWriter(log) as writer:
        for event in SAMPLES:
            writer.write(event)
    log.write_bytes(log.read_bytes()[:-7])  # the last event cut short, as a killed writer leaves it
    done = _dump(log)
    assert done.returncode == 1 and len(done.stdout.splitlines()) == len(SAMPLES) - 1
    assert done.stderr.startswith("specmon: ") and "truncated" in done.stderr and "Traceback" not in done.stderr
    assert f"the {len(SAMPLES) - 1} events before it were written" in done.stderr
    missing = _dump(tmp_path / "none.specmon")
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
