"""The pop-ups: help and the replay's jump box. Each lays itself out; the main grid is not theirs."""

from __future__ import annotations

import re
from typing import Callable

from rich.console import Group
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from specmon.text import HANGING, Hanging
from specmon.errors import SpecmonError

HELP = """[b]specmon[/b]: speculative decoding, round by round, every pane from events
Each pane's title names its round set: the class and the k it shows.
[b]acceptance[/]  accepted/proposed per round; [b]m[/] cycles rate, mean accepted
            length, α̂. [dim]·[/] proposed nothing ("empty"): counted apart
[b]speed[/]       speedup = goodput at k / plain (k=0 rounds), same class; its
            95% interval over prompts: [yellow]not yet known[/] while it holds 1.0,
            [magenta]noise[/] above what counts allow; its foot: the policy's last k
[b]rejections[/]  where the first rejection fell (rej), rounds with none (all
            accepted) and per-position acceptance a_i, for positions 0…k-1
[b]ms[/]          draft, verify and overhead milliseconds per round
[b]memory[/]      VRAM and RSS in use (GiB), each KV cache's size (MiB)
[b]classes[/]     per class at its k: rounds, empty, acceptance, mean accepted
            length, speedup (? unknown, ~ busy host), on/off d<id>/plain
[b]decisions[/]   the policy's decisions (› one prompt's own); Enter or a click
            shows their rounds
[b]requests[/]    (serve) waiting; decoding: endpoint id \\[class] k, tokens, time
            since it came; time to first token (queue wait included)
[b]text[/]        [green]accepted draft[/] [bold red]correction[/] [bold cyan]bonus[/] plain
Keys: [b]p[/] pause view  [b]m[/] metric  [b]t[/] text only  [b]q[/] quit  [b]ctrl+p[/] palette"""

REPLAY_HELP = """Replay: [b]space[/] play/pause  [b]n[/] step a round  [b]s[/] speed  [b]g[/] jump
        (r<round id>, p:<prompt id>, d<decision id>)"""


class Overlay(ModalScreen):
    """A box of text over the monitor, closed by any key or a click; opaque, so no pane's border shows beside it."""

    DEFAULT_CSS = """
    Overlay { align: center middle; background: $background; }
    Overlay > VerticalScroll {
        width: 80; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; border-title-color: $text-accent; padding: 0 1; background: $surface;
    }
    Overlay Static { width: 100%; height: auto; }
    """

    def __init__(self, body, title: str = ""):
        super().__init__()
        self.body, self.title = body, title

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = self.title
            yield Static(self.body, id="overlay-text")
            yield Static("[dim]Press any key to close.[/]")

    def on_key(self, event) -> None:
        event.stop()
        self.dismiss()

    on_click = on_key  # a click closes it as a key does


class HelpScreen(Overlay):
    """What every pane shows and every key does."""

    def __init__(self, replay: bool = False):
        super().__init__("\n".join([HELP] + ([REPLAY_HELP] if replay else [])), "help")


class DecisionScreen(Overlay):
    """What a policy decision was computed from: each line wraps under its value; text, never markup."""

    def __init__(self, detail: str, decision_id: int):
        # a line that starts with a short label goes on under its value
        labelled = [(line, re.match(r"[a-z]{1,12}: ", line)) for line in detail.splitlines() if line]
        hung = [Hanging(line, len(label.group()) if label else len(HANGING)) for line, label in labelled]
        super().__init__(Group(*hung), f"decision d{decision_id}")


class JumpScreen(ModalScreen):
    """Where to jump: `jump(target)` takes it or raises SpecmonError, whose line stays in the box (not a toast
    over the panes) until a target is taken or Escape; the box closes with what `jump` returned."""

    AUTO_FOCUS = "Input"
    BINDINGS = [Binding("escape", "dismiss", "cancel")]
    DEFAULT_CSS = """
    JumpScreen { align: center middle; }
    JumpScreen > Vertical {
        width: 64; max-width: 100%; height: auto; border: round $accent; padding: 0 1; background: $surface;
    }
    JumpScreen Static { width: 100%; height: auto; }
    JumpScreen #jump-error { color: $error; display: none; }
    JumpScreen Input { width: 100%; }
    """

    def __init__(self, jump: Callable[[str], object], hint: str, examples: str):
        super().__init__()
        self.jump, self.hint, self.examples = jump, hint, examples

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(f"{self.hint}\n[dim]Enter jumps, Escape cancels[/]")
            yield Input(placeholder=self.examples, id="jump")
            yield Static("", id="jump-error", markup=False)

    def on_input_submitted(self, message: Input.Submitted) -> None:
        target = message.value.strip()
        try:
            self.dismiss(self.jump(target) if target else None)
        except SpecmonError as exc:  # the view and the position stay as they were
            error = self.query_one("#jump-error", Static)
            error.update(str(exc))
            error.display = True
