"""`specmon serve`: OpenAI's API served from a live session, each request one of its prompts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from specmon.backends.profiles import load_profile
from specmon.console import notice, print_error, print_line
from specmon.errors import SpecmonError
from specmon.policy.schema import load_policy
from specmon.server.auth import check_host, read_api_key
from specmon.cli.flags import memory_options, wants_tui
from specmon.cli.run import load_saying
from specmon.transport.session import live_session
from specmon.tui.beside import serve_under_tui


def cmd_serve(args) -> int:
    from specmon.server.runner import ServeOptions, Serving, bind, interrupt_when_up

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
            pair.drafter,
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


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # requests are tokenized on threads of their own
