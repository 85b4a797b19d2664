"""--help's formatter, and the measuring tools' command lines (`specmon bench ...`, `specmon policy tune`)."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

from specmon.cli.flags import add_inputs, add_memory_flags, add_profile, whole
from specmon.text import wrapped_lines


EXAMPLE = re.compile(r"(?P<lead> +)(?P<command>\S.*?)  +(?P<note>\S.*)")  # `  specmon run   what it does`
NOTE_INDENT = "    "  # a note that cannot sit beside its example goes on under it, this much further in
SHELL_WORD = re.compile(r"""'[^']*'|"[^"]*"|\S+""")  # a quoted argument stays one word
USAGE_PARTS = re.compile(r"\(.*?\)+(?=\s|$)|\[.*?\]+(?=\s|$)|\S+")  # argparse's own: a group whole, or a word
USAGE_INDENT = "    "


class Teaching(argparse.HelpFormatter):
    """Prose wraps to the terminal at spaces only (never at `torch-nopad`'s hyphen); an epilog's example keeps
    its note beside it where the line fits, else under it."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(self._fill_line(line, width, indent) for line in text.splitlines())

    def _split_lines(self, text: str, width: int) -> list[str]:
        return prose(text, width)

    def _fill_line(self, line: str, width: int, indent: str) -> str:
        if not line.strip():
            return line
        if not line.startswith(" "):
            return "\n".join(prose(line, width, indent))
        if len(line) <= width:
            return line  # a command is copied as written where it fits
        example = EXAMPLE.fullmatch(line)
        if example is None:
            lead = line[: len(line) - len(line.lstrip())]
            return "\n".join(continued(lead, line.strip(), width))
        note = prose(example["note"], width, example["lead"] + NOTE_INDENT)
        return "\n".join([*continued(example["lead"], example["command"], width), *note])

    def _format_usage(self, usage, actions, groups, prefix) -> str:
        """argparse's usage, its options packed under a short indent where one would run past the width."""
        text = super()._format_usage(usage, actions, groups, prefix)
        if all(len(line) <= self._width for line in text.splitlines()):
            return text
        flat = " ".join(text.split())
        return "\n".join(wrapped_lines(flat, self._width, USAGE_INDENT, whole=USAGE_PARTS.findall(flat))) + "\n\n"


def continued(lead: str, command: str, width: int) -> list[str]:
    """A shell command broken before an option or a pipe into lines ending in ` \\`, as a shell takes them."""
    ends_continued = command.endswith(" \\")
    tokens = SHELL_WORD.findall(command.removesuffix(" \\"))
    units: list[list[str]] = []
    for token in tokens:  # an option with its value, or a pipe with its command, is one unit
        if not units or token.startswith("-") or token == "|":
            units.append([token])
        else:
            units[-1].append(token)
    lines, line, cont = [], lead, lead + NOTE_INDENT
    for unit in units:
        for piece in [" ".join(unit)] if len(cont + " ".join(unit) + " \\") <= width else unit:
            if line.strip() and len(line + " " + piece + " \\") > width:
                lines.append(line + " \\")
                line = cont
            line += piece if not line.strip() else " " + piece
    return lines + [line + (" \\" if ends_continued else "")]


def prose(text: str, width: int, indent: str = "") -> list[str]:
    """A help text's words in lines of `width` under `indent` (argparse's own wrap breaks at hyphens)."""
    return wrapped_lines(indent + " ".join(text.split()), width, indent, fold=True)


def add_bench(sub) -> None:
    """`bench policy`, `bench verify`, `bench engines`, `bench serve`."""
    bench = sub.add_parser("bench", help="measure: policy vs fixed k, verify cost, engines, serving").add_subparsers(
        required=True, metavar="WHAT"
    )
    policy = bench.add_parser(
        "policy",
        help="auto policy vs every fixed k per class, interleaved prompt by prompt",
        description="The policy decodes the prompt set --repeat times, learning as it goes; right after each "
        "of its prompts the same prompt runs at every fixed k (0 = plain) in a rotating order. "
        "Prints goodput per class for each k, the best fixed k and the policy (what it spends "
        "learning counted), and logs every run (`specmon policy explain LOG` works on it).",
    )
    add_inputs(policy)
    policy.add_argument("--policy", default="default", help="policy file or shipped name (default: default)")
    add_memory_flags(policy)
    policy.add_argument("--drafter", choices=["ngram", "layerskip", "model"], help="override the profile's drafter")
    policy.add_argument("--layers", type=whole(1), help="layer-skip draft depth")
    policy.add_argument(
        "--ks",
        default="0,1,2,3,4,5,6,7,8",
        help="fixed draft lengths, e.g. 0-8 or 2,4,7 (plain, k=0, is always included; default 0-8)",
    )
    policy.add_argument("--repeat", type=whole(1), default=3, help="passes over the prompt set (default 3)")
    policy.add_argument(
        "--fixed-passes",
        type=whole(0),
        default=0,
        help="run the fixed k > 0 only in the first N passes (0: every pass); plain runs in all",
    )
    policy.add_argument("--max-new-tokens", type=whole(1), default=48)
    policy.add_argument(
        "--half",
        choices=["tune", "test"],
        help="only the prompts of one half of the set (ids "
        "ending in an odd number: tune; even: test); `--prompts bench` is the shipped set "
        "(`--prompts holdout`: a second one, all of it held out)",
    )
    policy.add_argument("--log", type=Path, help="session log (default logs/SESSION.specmon)")
    policy.add_argument("--json", type=Path, help="also write the per-class figures as JSON here")
    policy.set_defaults(handler=lazy("specmon.cli.bench", "cmd_bench"))
    for add in (_add_verify, _add_engines, _add_serve):
        add(bench)


def add_policy_tune(policy) -> None:
    tune = policy.add_parser(
        "tune",
        help="replay a bench log's greedy texts under the policy and every fixed k, with modelled costs",
        description="Tune a policy without timing noise. Greedy decoding emits the same tokens at every k, so what each "
        "round of the policy and of every fixed k proposes and accepts is replayed exactly from the plain "
        "texts of a `specmon bench policy` log; only its time is modelled: a round proposing L tokens "
        "costs cost(L) plain steps, from --costs (measure them with `specmon bench verify`), else as the log "
        "measured them at load (an older log: fitted on its own rounds). Prints goodput over plain per "
        "class for each k and for the policy, which cuts drafts and decides on these rounds as it would live. "
        "Choose defaults on the tuning half; quote measured figures (`specmon bench policy`) on the test half.",
        epilog="example:\n  specmon bench policy --prompts bench --half tune --log bench.specmon\n"
        "  specmon policy tune bench.specmon --prompts bench --half tune \\\n"
        "      --policy my.toml --costs 1.17,1.23,1.55,1.55,1.58,1.60,1.50,1.58 \\\n"
        "      --json tune.json",
    )
    tune.add_argument("log", type=Path, help="a `specmon bench policy` log (its plain runs give the texts)")
    tune.add_argument("--policy", default="default", help="policy file or shipped name (default: default)")
    add_profile(tune, "the profile whose tokenizer the log used")
    tune.add_argument(
        "--prompts",
        type=Path,
        help="the prompt set the log ran, as given to bench policy (a file or "
        "a shipped set's name; default: the built-in suite)",
    )
    tune.add_argument("--classes", help="comma-separated classes to replay (default: all)")
    tune.add_argument("--half", choices=["tune", "test"], help="only the prompts of one half of the set")
    tune.add_argument("--ks", default="0,2,4,7,8", help="fixed draft lengths (plain, k=0, always; default 0,2,4,7,8)")
    tune.add_argument("--repeat", type=whole(1), default=1, help="passes over the prompts (default 1)")
    tune.add_argument(
        "--costs",
        help="cost of a round proposing L = 1, 2, ... tokens, in plain steps "
        "(default: as the log measured them at load; an older log: fitted on its rounds)",
    )
    tune.add_argument(
        "--pad-from",
        type=int,
        choices=(0, 2, 3, 4),
        help="verify passes of this many positions or "
        "more run as 9 padded rows (0: none; default: as the log's session header says)",
    )
    tune.add_argument("--json", type=Path, help="also write the per-class figures as JSON here")
    tune.set_defaults(handler=lazy("specmon.cli.bench", "cmd_tune"))


def _add_verify(bench) -> None:
    verify = bench.add_parser(
        "verify",
        help="cost of one target pass over T = 1..9 positions, in plain steps",
        description="Measure what a verify pass costs: one target pass over T positions (a round at k = T-1 verifies "
        "T) relative to a one-position plain step, the v(k) of the predicted speedup, timed as a session "
        "times it at load (a T pass and the plain step after it, less a plain step). With a torch "
        "profile, the plain fp32 kernels and weights packed for --packed-rows rows are timed interleaved, "
        "rep by rep, on one machine state; other backends time their own kernels.",
        epilog="example:\n  specmon bench verify --context 300 --reps 5 --json verify.json\n"
        "  specmon bench verify --profile smollm2-llamacpp      llama.cpp's kernels alone",
    )
    add_profile(verify, "a profile name or file")
    verify.add_argument("--context", type=whole(1), default=300, help="tokens already in the cache (default 300)")
    verify.add_argument(
        "--reps", type=whole(1), default=5, help="timed rounds of every T; the least is kept (default 5)"
    )
    verify.add_argument("--max-positions", type=whole(1), default=9, help="largest T (default 9)")
    verify.add_argument(
        "--packed-rows",
        type=whole(1),
        default=9,
        help="rows the packed weights are laid out for (the profile key packed_rows; default 9)",
    )
    verify.add_argument("--json", type=Path, help="also write the costs as JSON here")
    verify.set_defaults(handler=lazy("specmon.cli.measure", "cmd_bench_verify"))


def _add_engines(bench) -> None:
    engines = bench.add_parser(
        "engines",
        help="engines side by side: plain tok/s and n-gram speedup over each engine's own plain",
        description="Decode the built-in suite greedily on every engine (torch fp32, with and without packed verify "
        "weights, packed without padding 2-3 position passes; llama.cpp where llama-cpp-python is "
        "installed), plainly and with the n-gram drafter at --draft-len, interleaved per prompt so machine "
        "load drifts cancel. Per engine: plain tok/s, the n-gram speedup over its own plain (goodput ratio "
        "with a 95% interval over prompts), and the prompts whose speculative output equals its own plain.",
        epilog="example:\n  specmon bench engines --tokens 64 --draft-len 4 --threads 2 \\\n"
        "      --json engines.json\n"
        "--reference BIN adds llama.cpp's own plain greedy loop, no Python in it: BIN is "
        "scripts/llamacpp_reference.cpp built against the library llama-cpp-python installed (see that file).",
    )
    engines.add_argument(
        "--engines",
        default="torch-fp32,torch-nopack,torch-nopad,llamacpp",
        help="comma-separated, of torch-fp32, torch-nopack, torch-nopad, llamacpp (default: all)",
    )
    add_profile(engines, "the torch engines' profile")
    engines.add_argument(
        "--llamacpp-profile",
        default="smollm2-llamacpp",
        help="the llamacpp engine's profile (default: smollm2-llamacpp)",
    )
    engines.add_argument("--classes", help="comma-separated built-in classes (default: all)")
    engines.add_argument("--tokens", type=whole(1), default=64, help="new tokens per prompt (default 64)")
    engines.add_argument("--draft-len", type=whole(1), default=4, help="the n-gram drafter's k (default 4)")
    engines.add_argument(
        "--threads", type=whole(0), default=0, help="CPU threads for every engine (0: torch's default)"
    )
    engines.add_argument("--reps", type=whole(1), default=1, help="passes over the prompts (default 1)")
    engines.add_argument(
        "--reference", metavar="BIN", help="llama.cpp's own loop, built from scripts/llamacpp_reference.cpp"
    )
    engines.add_argument("--json", type=Path, help="also write the per-engine figures as JSON here")
    engines.set_defaults(handler=lazy("specmon.cli.measure", "cmd_bench_engines"))


def _add_serve(bench) -> None:
    serve = bench.add_parser(
        "serve",
        help="tokens/s streamed through `specmon serve` against direct decoding of the same prompts",
        description="Measure what serving costs: tokens/s of prompts streamed through the OpenAI-compatible server "
        "(the official openai client, in a child process, on loopback) against direct decoding of the "
        "same prompts by the session driver, interleaved prompt by prompt; then --clients concurrent "
        "clients. Both decode at one fixed k in one session and log. Time to first token and per-token "
        "latency are measured at the client. Needs the openai package.",
        epilog="example:\n  specmon bench serve --count 10 --max-tokens 64 --repeat 2 --json serve.json",
    )
    add_profile(serve, "a profile name or file")
    serve.add_argument("-k", "--draft-len", type=int, help="fixed k for both paths (default: the profile's)")
    serve.add_argument("--prompts", type=Path, help="JSON lines prompt file (default: the built-in suite)")
    serve.add_argument("--count", type=whole(1), default=10, help="prompts taken, spread over the set (default 10)")
    serve.add_argument("--max-tokens", type=whole(1), default=64, help="new tokens per request (default 64)")
    serve.add_argument("--repeat", type=whole(1), default=2, help="passes over the prompts at 1 client (default 2)")
    serve.add_argument("--clients", type=whole(1), default=4, help="concurrent clients of the last pass (default 4)")
    serve.add_argument("--log", type=Path, help="session log (default: a temporary file)")
    serve.add_argument("--json", type=Path, help="also write the table as JSON here")
    serve.set_defaults(handler=lazy("specmon.cli.measure", "cmd_bench_serve"))


def lazy(module: str, name: str):
    """A command whose module is imported when it runs, so `specmon --help` and `specmon log info` start fast."""
    return lambda args: getattr(importlib.import_module(module), name)(args)
