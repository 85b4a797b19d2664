"""`specmon run`: load the pair, open the live session, and let a scheduler (plain-vs-speculative
pairing, or a policy) feed the driver, under the TUI or a progress bar."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Callable

import msgspec

from specmon.backends.profiles import DrafterSpec, load_profile
from specmon.cli.console import err, out, progress
from specmon.cli.tables import class_table, divergence_lines
from specmon.engine.draft_len import check_draft_len
from specmon.engine.prompts import builtin_suite, load_prompts
from specmon.errors import SpecmonError
from specmon.events.schema import Sampling
from specmon.metrics.stats import class_stats, summary
from specmon.policy.schema import load_policy
from specmon.transport.serve import parse_listen
from specmon.transport.session import LiveSession, Stopped, live_session

Work = Callable[[Callable[[int], None] | None], None]  # decodes every prompt, reporting how many are done


def cmd_run(args) -> int:
    from specmon.backends.loader import load_pair  # loads torch; keep `specmon --help` fast
    from specmon.policy.engine import PolicyEngine
    from specmon.sched.pairing import run_paired
    from specmon.sched.policy import PolicyScheduler

    profile = load_profile(args.profile)
    if args.policy and args.draft_len is not None:
        raise SpecmonError("-k/--draft-len cannot be used with --policy: the policy chooses k per class "
                           "(set draft_len in the policy file)")
    sampling, spec = overrides(args, profile)
    prompts = load_prompts(args.prompts) if args.prompts else builtin_suite(_classes(args.classes))
    listen = parse_listen(args.listen) if args.listen else None
    policy = load_policy(args.policy) if args.policy else None
    max_new_tokens = args.max_new_tokens or profile.max_new_tokens
    with err.status(f"loading {profile.target.describe()} ({profile.dtype}, {profile.device})"):
        pair = load_pair(profile, spec)
    mode = f"policy {Path(policy.source).name}" if policy else f"k={spec.draft_len}"
    title = f"{profile.name}: {pair.drafter.name} {mode}, {_sampling_text(sampling)}"
    tui = _wants_tui(args)
    with live_session(pair, profile, pair.drafter, args.log, listen=listen, policy=policy, viewer=tui) as session:
        if policy is not None:
            scheduler = PolicyScheduler(session.driver, PolicyEngine(policy, session.session_id), pair.drafter)
            work: Work = lambda done: scheduler.run(prompts, sampling, max_new_tokens, done)  # noqa: E731
        else:
            work = lambda done: run_paired(session.driver, prompts, pair.drafter, spec.draft_len,  # noqa: E731
                                           sampling, max_new_tokens, done)
        if tui:
            decode_under_tui(session, work, title)
        else:
            what = f"{pair.drafter.name} {mode}" + ("" if policy else " vs plain")
            with progress(what, len(prompts)) as done:
                work(done)
    table = summary(class_stats(session.events))
    out.print(class_table(table, f"{title}  (log: {session.log_path})"))
    for line in divergence_lines(session.events):
        out.print(line, highlight=False, markup=False)
    if args.json:
        write_json(args.json, table)
    return 0


def write_json(path, data: dict) -> None:
    try:
        path.write_text(json.dumps(data, indent=2))
    except OSError as exc:
        raise SpecmonError(f"{path}: cannot write the JSON summary ({exc.strerror})") from None


def decode_under_tui(session: LiveSession, work: Work, title: str) -> None:
    """Decode on a thread; the app (main thread) drains a bounded view of the channel. Quitting
    the app stops the decode at its next event; an error in the decode thread is raised here."""
    from specmon.tui.factory import make_app
    from specmon.tui.feed import Feed

    stop = threading.Event()
    feed = Feed(session.view, title)
    failed: list[BaseException] = []
    publish = session.driver.emit

    def emit(event) -> None:
        if stop.is_set():
            raise Stopped
        publish(event)

    def fail(exc: BaseException) -> None:
        """Shown in the title now, raised once the app has closed."""
        failed.append(exc)
        feed.error = str(exc) if isinstance(exc, SpecmonError) else f"decode failed: {exc!r}"

    def decode() -> None:
        reason = "done"
        try:
            work(None)
        except Stopped:
            reason = "interrupted"
        except BaseException as exc:
            reason = "error"
            fail(exc)
        finally:
            try:
                session.finish(reason)  # the view and attached clients see the session end now
            except BaseException as exc:
                if not failed:
                    fail(exc)
            feed.done.set()

    session.driver.emit = emit
    worker = threading.Thread(target=decode, name="specmon-decode")
    worker.start()
    try:
        make_app(feed).run()
    finally:
        stop.set()
        worker.join()
    if failed:
        raise failed[0]


def overrides(args, profile) -> tuple[Sampling, DrafterSpec]:
    """The profile's sampling and drafter, with the command line's flags over them."""
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
        draft_len=d.draft_len if args.draft_len is None else check_draft_len(args.draft_len, "--draft-len"),
        layers=args.layers or d.layers,
    )
    return sampling, spec


def _classes(text: str | None) -> list[str] | None:
    return text.split(",") if text else None


def _wants_tui(args) -> bool:
    return not args.headless and sys.stdout.isatty() and sys.stdin.isatty()


def _sampling_text(sampling: Sampling) -> str:
    return "greedy" if sampling.greedy else f"T={sampling.temperature} top_p={sampling.top_p}"
