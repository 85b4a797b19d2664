"""`specmon run`: a scheduler (plain-vs-speculative pairing, or a policy) feeds a live session's driver;
`specmon serve`: OpenAI's API served from a live session, each request one of its prompts."""

from __future__ import annotations

import functools
import json
import os
import signal
from pathlib import Path

from rich.markup import escape

from specmon.backends.profiles import load_profile, overrides
from specmon.console import err, notice, out, print_error, print_line, progress, say, wants_tui
from specmon.textfile import check_new_log
from specmon.tables import class_table, divergence_lines, print_host_line
from specmon.engine.prompts import prompt_set
from specmon.errors import SpecmonError
from specmon.metrics.stats import class_stats, summary
from specmon.policy.engine import PolicyEngine
from specmon.policy.schema import load_policy
from specmon.sched.bench import prompts_path
from specmon.sched.pairing import run_paired
from specmon.sched.policy import PolicyScheduler
from specmon.server.auth import check_host, read_api_key
from specmon.transport.serve import parse_listen
from specmon.cli.flags import memory_options
from specmon.transport.session import live_session
from specmon.tui.beside import decode_under_tui, serve_under_tui


def cmd_run(args) -> int:
    profile = load_profile(args.profile)
    if args.policy and args.draft_len is not None:
        raise SpecmonError(
            "-k/--draft-len cannot be used with --policy: the policy chooses k per class "
            "(set draft_len in the policy file)"
        )
    sampling, spec = overrides(args, profile)
    if args.policy and spec.kind == "none":
        raise SpecmonError(
            "--policy needs a drafter: the policy chooses k per class for it; drop --drafter none "
            '(or set speculate = "off" in the policy)'
        )
    prompts = prompt_set(prompts_path(args.prompts), args.classes)
    listen = parse_listen(args.listen) if args.listen else None
    policy = load_policy(args.policy) if args.policy else None
    check_json(args.json)  # before the run, not after it
    check_new_log(args.log)
    max_new_tokens = profile.max_new_tokens if args.max_new_tokens is None else args.max_new_tokens
    pair = load_saying(profile, spec)
    mode = f"policy {Path(policy.source).name}" if policy else f"k={spec.draft_len}"
    said = "greedy" if sampling.greedy else f"T={sampling.temperature} top_p={sampling.top_p}"
    title = f"{profile.name}: {pair.drafter.name} {mode}, {said}"
    tui = wants_tui(args)
    interrupted: KeyboardInterrupt | None = None
    remembers = memory_options(args, profile, pair.drafter.name, spec) if policy else {}
    with live_session(pair, profile, args.log, listen=listen, policy=policy, viewer=tui, **remembers) as session:
        if policy is not None:  # work(done) decodes every prompt, reporting how many are done
            engine = PolicyEngine(policy, session.session_id, session.costs, session.policy_shelf(sampling))
            scheduler = PolicyScheduler(session.driver, engine, pair.drafter)
            work = functools.partial(scheduler.run, prompts, sampling, max_new_tokens)
        else:
            work = functools.partial(
                run_paired, session.driver, prompts, pair.drafter, spec.draft_len, sampling, max_new_tokens
            )
        if tui:
            decode_under_tui(session, work, title)
        else:
            what = f"{pair.drafter.name} {mode}" + ("" if policy else " vs plain")
            try:
                with progress(escape(what), len(prompts)) as done:
                    work(done)
            except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: what finished is still worth its table
                session.finish("interrupted")
                interrupted = stop
    table = summary(class_stats(session.events))
    out.print(class_table(table, title, session.log_path))
    for line in divergence_lines(session.events):
        say(line)
    print_host_line(session.events)
    write_json(args.json, table)
    if interrupted is not None:
        raise interrupted  # the table is out; main says how it ended and exits 130 (or 128 + the signal)
    return 0


def cmd_serve(args) -> int:
    from specmon.server.runner import ServeOptions, Serving, bind, interrupt_when_up

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # requests are tokenized on threads of their own
    profile = load_profile(args.profile)
    if args.policy is not None and args.draft_len is not None:
        raise SpecmonError("-k/--draft-len cannot be used with --policy: serve either under a policy or at a fixed k")
    policy = load_policy(args.policy or "default") if args.draft_len is None else None
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    check_host(args.host, api_key is not None)
    tui = wants_tui(args)
    # Listen before loading: a port in use is one line at once, not after the model loads, and opens no log.
    listening = bind(args.host, args.port)
    try:
        options = ServeOptions(
            host=args.host,
            port=args.port,
            api_key=api_key,
            max_queue=args.max_queue,
            draft_len=args.draft_len,
            line=None if tui else print_line,
            socket=listening,
        )
        try:
            pair = load_saying(profile)
        except KeyboardInterrupt as exc:  # Terminated too: no session has begun, so there is no log to speak of
            signum = getattr(exc, "signum", signal.SIGINT)
            print_error(f"ended by {signal.Signals(signum).name} while the model was loading; no log was written")
            return 128 + signum
        with live_session(
            pair,
            profile,
            args.log,
            policy=policy,
            keep_events=False,
            viewer=tui,
            rotation=args.rotation,
            **(memory_options(args, profile, pair.drafter.name) if policy else {}),
        ) as session:
            serving = Serving(session, pair, profile, options, policy)
            mode = f"policy {Path(policy.source).name}" if policy else f"fixed k={options.draft_len}"
            what = f"{pair.target.name} ({pair.drafter.name}, {mode}) on {serving.url}/v1"
            keyed = "" if api_key is None else "; clients must send the API key"
            # The address first: it is what a client needs, and a long model path cannot push it off the first line.
            start = f"serving on {serving.url}/v1: {pair.target.name} ({pair.drafter.name}, {mode}){keyed}"
            if tui:
                notice(start)
                serve_under_tui(session, serving, f"serve: {what}")
            else:
                with interrupt_when_up(serving.server):
                    notice(start)
                    serving.run()
    finally:
        listening.close()  # Serving.run closes it too; a failure before that must not leave it open
    return 0


def load_saying(profile, spec=None):
    """The profile's pair, loaded under a status line that names the target, its dtype and device."""
    from specmon.backends.loader import load_pair  # torch takes a second: only once every input is checked

    with err.status(escape(f"loading {profile.target.describe()} ({profile.dtype}, {profile.device})")):
        return load_pair(profile, spec)


def check_json(path: Path | None) -> None:
    """--json's folder exists and can be written, checked before a run spends minutes."""
    if path is None:
        return
    folder = path.parent
    if path.is_dir():
        reason = "is a folder"
    elif not folder.is_dir():
        reason = f"folder {folder} does not exist"
    elif not os.access(folder, os.W_OK):
        reason = f"folder {folder} is not writable"
    else:
        return
    raise SpecmonError(f"--json {path}: cannot write there ({reason})")


def write_json(path: Path | None, data: dict) -> None:
    """The figures as JSON at --json's path, if one was given."""
    if path is None:
        return
    try:
        path.write_text(json.dumps(data, indent=2))
    except OSError as exc:
        raise SpecmonError(f"{path}: cannot write the JSON summary ({exc.strerror})") from None
