"""The commands that read sessions: `attach`, `log info`, `log dump`, `replay`, `report` and `policy`."""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specmon.console import err, out, print_error, say, wants_tui
from specmon.tables import class_table, print_host_line
from specmon.text import Hanging, wrapped_lines
from specmon.data import read_shipped, shipped
from specmon.errors import SpecmonError
from specmon.events.log import LogDamaged, default_log_path, read_log
from specmon.events.parts import parts_said
from specmon.events.schema import (
    bench_fixed_k,
    Decision,
    LogRotated,
    PolicyLoaded,
    PromptFinished,
    PromptStarted,
    RoundVerified,
    SessionFinished,
    SessionStarted,
)
from specmon.metrics.format import count
from specmon.metrics.served import SERVED_BACKENDS
from specmon.metrics.stats import class_stats, summary
from specmon.policy.edit import set_value
from specmon.policy.explain import Explanation, explain_log, moves, what_changed
from specmon.policy.route import cited_words
from specmon.policy.schema import PolicyError, load_policy
from specmon.metrics.contention import tally
from specmon.sched.bench import bench_results
from specmon.transport.attach import attach_events, read_token
from specmon.transport.serve import runtime_dir
from specmon.transport.sessions import describe, live_sessions, newest_log


def cmd_policy(args) -> int:
    if args.policy_command == "show":
        if args.name not in shipped("policies"):
            raise SpecmonError(f"no shipped policy {args.name!r}; shipped: {', '.join(shipped('policies'))}")
        sys.stdout.write(read_shipped("policies", args.name))
        return 0
    if args.policy_command == "check":
        return check_policy(args.file)
    if args.policy_command == "set":
        if not args.file.exists() and args.file.parent == Path(".") and args.file.stem in shipped("policies"):
            raise SpecmonError(
                f"{args.file}: the shipped policies are not edited in place; copy one first: "
                f"specmon policy show {args.file.stem} > my.toml"
            )
        set_value(args.file, args.key, args.value)
        say(f"{args.file}: {args.key} = {args.value}")
        return 0
    damage: list[LogDamaged] = []
    explanations = explain_log(args.log, args.decision, damage.append)
    if damage:  # a cut copy or a full disk: the decisions before it still explain
        out.print(f"[yellow]{escape(str(damage[0]))}; explaining what precedes it[/]", highlight=False)
    if not explanations:
        say(f"{args.log} holds no policy decisions" + (" before the damage" if damage else ""))
        return 1 if damage else 0
    for e in explanations:
        print_explanation(e)
    good = sum(e.reproduces for e in explanations)
    say(f"{good} of {len(explanations)} decisions reproduce from what they cite")
    return 0 if good == len(explanations) and not damage else 1


def check_policy(file: Path) -> int:
    """`policy check`: each problem of the file on a line of its own, else its warnings and `ok`."""
    try:
        policy = load_policy(file)
    except PolicyError as exc:
        for problem in exc.problems:
            print_error(str(problem))
        return 2
    for warning in policy.warnings:
        say(f"warning: {warning}")  # regexes hold brackets
    say(
        f"{file}: ok, {len(policy.classes)} class{'es' if len(policy.classes) != 1 else ''}, mode {policy.settings.mode}"
    )
    return 0


def print_explanation(e: Explanation) -> None:
    """A decision, its rule and whether it reproduces, each move (`4: 6->2`) whole on a line; never markup."""
    d = e.decision
    change = what_changed(d)
    verdict = Text("reproduces", "green") if e.reproduces else Text("DOES NOT REPRODUCE", "red")
    said = f"decision {d.decision_id} [{d.prompt_class}] {change} by {d.rule_key} (line {d.rule_line}): "
    out.print(Hanging(Text.assemble(said, verdict, f": {e.detail}"), whole=moves(change)))


def cmd_attach(args) -> int:
    if args.token is not None:  # kept only to say why it went: a command line is readable by every local user
        raise SpecmonError(
            "--token was removed: any local user can read a command line (ps); use --token-file FILE "
            "(the path `specmon run --listen` printed) or the SPECMON_TOKEN environment variable"
        )
    token = read_token(args.token_file)
    target = args.target or pick_session(ask=sys.stdin.isatty() and sys.stderr.isatty())
    if wants_tui(args):
        from specmon.tui.factory import make_app
        from specmon.tui.feed import thread_feed

        feed = thread_feed(lambda: attach_events(target, token), f"attached to {target}")
        make_app(feed).run()
        if feed.error:
            raise SpecmonError(feed.error)
        return 0
    kept = []
    for ev in attach_events(target, token):
        if isinstance(ev, (RoundVerified, PromptFinished)):
            kept.append(ev)
        line = event_line(ev)
        if line:  # what a wrap keeps on one line: the model's dtype and device, a decision's moves
            started = [f"{ev.dtype} on {ev.device}"] if isinstance(ev, SessionStarted) else []
            out.print(Hanging(line, whole=moves(what_changed(ev)) if isinstance(ev, Decision) else started))
    if kept:
        out.print(class_table(summary(class_stats(kept)), "per class"))
    print_host_line(kept)
    return 0


def pick_session(ask: bool) -> str:
    """The socket of the one live session, or of the one the user picks among several (none: say the newest log)."""
    sessions = live_sessions()
    if len(sessions) == 1:
        return str(sessions[0].socket)
    if not sessions:
        raise _none_alive()
    err.print(f"{len(sessions)} sessions are running:", highlight=False)
    for i, info in enumerate(sessions, 1):
        err.print(Hanging(f"  {i}. {info.line()}", further=len(f"{i}. ")))  # wraps under its text, not at column 0
    if not ask:
        raise SpecmonError(
            "several sessions are running; name one: specmon attach SOCKET, with SOCKET one of "
            + ", ".join(str(s.socket) for s in sessions)
        )
    answer = input(f"attach to which? [1-{len(sessions)}, Enter for 1] ").strip() or "1"
    if not answer.isdigit() or not 1 <= int(answer) <= len(sessions):
        raise SpecmonError(f"{answer!r} is not one of 1..{len(sessions)}")
    return str(sessions[int(answer) - 1].socket)


def _none_alive() -> SpecmonError:
    where = f"no running session in {runtime_dir()}"
    log = newest_log(default_log_path("none").parent)
    if log is None:
        return SpecmonError(f"{where}; start one with `specmon run`", ("`specmon run`",))
    info = describe(log)
    if info.ended is not None:
        ended = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.ended))
        rounds, replay = f"({count(info.rounds, 'round')})", f"specmon replay {log}"
        return SpecmonError(
            f"{where}; the newest log, {log}, ended at {ended} {rounds}: {replay}", (ended, rounds, replay)
        )
    replay = f"specmon replay --follow {log}"
    return SpecmonError(
        f"{where}; the newest log, {log}, has no end written (still being written, or its run was killed): {replay}",
        (replay,),
    )


def event_line(ev) -> str | None:
    """One line per event worth a line, for a headless watcher."""
    if isinstance(ev, SessionStarted):
        return f"session {ev.session_id}: {ev.target}, drafter {ev.drafter}, {ev.dtype} on {ev.device}"
    if isinstance(ev, PromptStarted):
        return f"prompt {ev.prompt_id} [{ev.prompt_class}] k={ev.draft_len} {ev.drafter}"
    if isinstance(ev, RoundVerified):  # the first rejection is at `accepted`: no column of its own
        return (
            f"  round {ev.round_id:>6} k={ev.draft_len} accepted {ev.accepted}/{len(ev.proposed)} "
            f"emitted {len(ev.emitted)}  draft {ev.draft_ms:.2f} verify {ev.verify_ms:.1f} ms"
        )
    if isinstance(ev, Decision):
        applied = "" if ev.applied else " (advised, not applied)"
        cited = cited_words(ev.request_ids, ev.route.recalled) if ev.route else count(len(ev.round_ids), "round")
        return (
            f"decision {ev.decision_id} [{ev.prompt_class}] {what_changed(ev)}{applied} by {ev.rule_key}, from {cited}"
        )
    if isinstance(ev, SessionFinished):
        return f"session finished ({ev.reason}) after {count(ev.rounds, 'round')}"
    return None


def cmd_log(args) -> int:
    events: list = []
    damage = None
    try:
        events.extend(read_log(args.log))  # a damaged log: the events before the damage
    except LogDamaged as exc:
        damage = exc
    counts = Counter(type(ev).__name__ for ev in events)
    kept = [ev for ev in events if isinstance(ev, (PromptStarted, RoundVerified, PromptFinished))]
    policies = [ev for ev in events if isinstance(ev, PolicyLoaded)]
    started = next((ev for ev in reversed(events) if isinstance(ev, SessionStarted)), None)
    rotated = events[-1] if events and isinstance(events[-1], LogRotated) else None  # a rotated log's part ends so
    if started is not None:
        _print_header(started, kept)
    for name, n in sorted(counts.items()):
        say(f"  {name:<16} {n}")
    if events:
        say(f"  time span        {events[-1].t - events[0].t:.1f} s")
    if len(policies) > 1:  # the first PolicyLoaded is the policy the run started with
        _print_reloads(policies, events[0].t)
    print_hanging("  integrity        ", str(damage or "ok"), "red" if damage else "green")
    host = tally(kept)
    if host.measured:
        print_hanging("  host             ", host.said(), "yellow" if host.busy else "")
    explored = sum(isinstance(e, RoundVerified) and e.explored for e in kept)
    if explored:
        print_hanging("  explored         ", f"{explored} rounds verified a draft the policy had cut (explore_budget)")
    for label, said in parts_said(args.log, started, rotated):
        print_hanging(label, said)
    if not damage and events and not counts["SessionFinished"] and rotated is None:
        print_hanging("  ended            ", "no end written: the run is still going, or was killed", "yellow")
    if started is not None and started.backend in SERVED_BACKENDS:  # a server's traffic: no rounds of its own
        _print_served(args.log)
    if any(isinstance(e, PromptStarted) and bench_fixed_k(e) is not None for e in kept):
        from specmon.cli.bench import bench_table  # a bench log: the policy and each fixed k apart

        results = bench_results(kept)
        ks = sorted({k for c in results.values() for k in c.fixed})
        out.print(bench_table(results, ks, "bench: goodput, tokens/s, recomputed from the log"))
    elif kept:
        out.print(class_table(summary(class_stats(kept)), "per class"))
    return 1 if damage else 0


def print_hanging(label: str, value: str, style: str = "") -> None:
    """A line of `log info` wrapped under its value, the value in `style`; never markup."""
    hang = len(label) if label.strip() else len(label) + 2  # no label to hang under: two columns further in
    lines = wrapped_lines(label + value, out.width, " " * hang)
    text = Text("\n".join(lines))
    text.stylize(style, len(label))
    out.print(text)


def _print_reloads(policies: list[PolicyLoaded], start: float) -> None:
    """Each edit after the first policy, taken (what changed) or refused (why); then the policy in force at the end."""
    refused = sum(not ev.accepted for ev in policies)
    say(f"  policy reloads   {len(policies) - 1 - refused} taken, {refused} refused")
    for ev in policies[1:]:
        what = (
            f"taken, changed {', '.join(ev.changed) or 'nothing a class runs by'}"
            if ev.accepted
            else f"refused: {(ev.error.splitlines() or ['no reason logged'])[0]}"
        )
        print_hanging(f"    +{ev.t - start:.1f} s ", what)
    in_force = [ev for ev in policies if ev.accepted][-1]
    if in_force is not policies[0]:
        say(f"  policy at the end sha256 {in_force.sha256[:16]}…")


def _print_served(log: Path) -> None:
    """log info's served-traffic section: the watched server's totals, then the proxy's table and advice."""
    from specmon.metrics.served_summary import info_lines, logged, served_summary

    s = served_summary(log)
    for label, value in info_lines(s):
        print_hanging(label, value)
    if s["classes"]:
        from specmon.proxy.tables import log_summary

        out.print(log_summary(logged(log)))


def _print_header(ev: SessionStarted, events: list) -> None:
    # Names come from user files (profiles, hosts): printed as they are, never parsed as markup.
    say(f"session {ev.session_id}  specmon {ev.specmon_version}  profile {ev.profile_name}")
    ran = dict.fromkeys(e.drafter for e in events if isinstance(e, PromptStarted) and e.draft_len)
    per_prompt = f"{', '.join(ran)} (per prompt)" if ran else "none"  # a session that loaded no drafter: a sweep
    drafters = ev.drafter if ev.drafter != "none" else per_prompt
    model = f"  {ev.dtype} on {ev.device}" if ev.dtype or ev.device else ""  # a watch or proxy decodes nothing
    print_hanging("  ", f"target {ev.target}  drafter {drafters}{model}  backend {ev.backend}")
    if ev.host:
        host = ", ".join(f"{k} {v}" for k, v in ev.host.items())
        print_hanging("  host: ", host)
    if ev.policy_hash:
        say(f"  policy sha256 {ev.policy_hash[:16]}…")
    if ev.verify_ms:
        curve = " ".join(f"{ms / ev.verify_ms[0]:.2f}" for ms in ev.verify_ms)
        timed = "pinned by the profile" if ev.verify_ms[0] == 1.0 else f"timed at load, a step {ev.verify_ms[0]:.1f} ms"
        draft = f", draft {ev.draft_ms:.2f} {'steps' if ev.verify_ms[0] == 1.0 else 'ms'}/token" if ev.draft_ms else ""
        curve_of = f"verify cost, plain steps, T = 1..{len(ev.verify_ms)} positions: {curve} ({timed}{draft})"
        print_hanging("  ", curve_of)
        if ev.verify_disturbed:
            disturbed = f"{ev.verify_disturbed} of its points timed while other work held the CPU"
            print_hanging("  ", disturbed, "yellow")


def cmd_replay(args) -> int:
    if args.policy:
        return _print_what_if(args.log, load_policy(args.policy))
    if args.headless or not sys.stdout.isatty():
        return cmd_log(args)  # log info, which reads only args.log
    from specmon.replay.player import ReplayFeed
    from specmon.tui.factory import make_app

    feed = ReplayFeed(args.log, speed=args.speed, follow=args.follow)
    make_app(feed).run()
    return 1 if feed.error else 0


def _print_what_if(log: Path, policy) -> int:
    from specmon.replay.whatif import what_if

    columns = ("class", "logged decisions", "other policy's decisions", "differs", "missing evidence")
    table = Table(*columns, title=escape(f"what if {policy.source} had decided on {log.name}"), title_justify="left")
    for name, diff in what_if(log, policy).items():
        missing = ", ".join(f"drafts of {k} never verified" for k in sorted(diff.missing)) or "-"
        logged, other = (escape("; ".join(decisions) or "-") for decisions in (diff.logged, diff.other))
        table.add_row(escape(name), logged, other, "[yellow]yes[/]" if diff.logged != diff.other else "no", missing)
    out.print(table)
    return 0


def cmd_report(args) -> int:
    from specmon.replay.report import ROUND_PLOTS, build_report

    page = build_report(args.log, args.out or Path("reports") / args.log.stem)
    drawn = any((page.parent / name).exists() for name in ROUND_PLOTS)  # a server's report draws none
    beside = "plots and report.json" if drawn else "report.json"
    say(f"report: {page} ({beside} beside it)")
    return 0


def by_name(value):
    """An event as plain data with its fields by name (the log stores them as arrays), nested ones too."""
    if isinstance(value, msgspec.Struct):
        return {f: by_name(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, (list, tuple)):
        return [by_name(v) for v in value]
    if isinstance(value, dict):
        return {k: by_name(v) for k, v in value.items()}
    return value


def cmd_log_dump(args) -> int:
    """Write the log's events to stdout; a damaged log is dumped up to the damage, which is named on stderr."""
    stdout, written = sys.stdout.buffer, 0
    try:
        for event in read_log(args.log):
            stdout.write(msgspec.json.encode({"type": type(event).__name__, **by_name(event)}) + b"\n")
            written += 1
        stdout.flush()
    except LogDamaged as exc:
        stdout.flush()
        print_error(f"{exc}; the {written} events before it were written")
        return 1
    except BrokenPipeError:  # `| head`: the reader has all it wanted
        sys.stderr.close()
    return 0
