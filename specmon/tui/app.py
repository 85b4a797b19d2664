"""The live monitor. One factory builds it for `run`, `attach`, `replay` and the tests."""

from __future__ import annotations

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, Static

from specmon.tui import panes
from specmon.tui.feed import Feed
from specmon.tui.state import ACCEPTANCE_METRICS, ViewState

DRAIN_INTERVAL_S = 1 / 15  # redraw rate ceiling; each tick applies one whole batch

HELP = """[b]specmon[/b] — speculative decoding, round by round

Panes are computed from events only, so a replay shows what the run showed.
  acceptance   sparkline per round; [b]m[/] switches acceptance rate / mean accepted length / α̂
  rejections   where the first rejection fell, with per-position acceptance a_i
  timing       draft vs verify milliseconds per round, and overhead
  speed        tokens/s with speculation against plain decoding, same class, same run
  classes      per prompt class: rounds, acceptance, mean accepted length, speedup, k, on/off
  text         generated text: [green]accepted draft[/], [bold red]correction[/], [bold cyan]bonus[/]

Keys: [b]p[/] pause/resume the view (decoding goes on)  [b]t[/] text only  [b]?[/] help  [b]q[/] quit
[b]ctrl+p[/] opens the command palette. Press any key to close."""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        yield Static(HELP)

    def on_key(self) -> None:
        self.app.pop_screen()


class SpecmonApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "specmon"
    AUTO_FOCUS = None  # nothing grabs focus on start, so the footer is the same on every start
    BINDINGS = [
        Binding("p", "toggle_pause", "pause view", tooltip="Stop refreshing panes; decoding and logging go on"),
        Binding("m", "cycle_metric", "metric", tooltip="Switch the acceptance sparkline's metric"),
        Binding("t", "toggle_text", "text only", tooltip="Give the generated text the whole screen"),
        Binding("question_mark", "help", "help", tooltip="What every pane shows"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, feed: Feed, state: ViewState | None = None):
        super().__init__()
        self.feed = feed
        self.state = state or ViewState()
        self.metric = ACCEPTANCE_METRICS[0]
        self.paused = False
        self.ticks = 0  # timer ticks that applied a batch
        self.redraws = 0  # pane refreshes: the rate the benchmark reads
        self._text_version = -1
        self._drawn_end = False  # once the feed has ended and been drawn, idle ticks draw nothing

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield panes.Pane("acceptance", id="acceptance", classes="stat")
        yield panes.Pane("memory", id="memory", classes="stat")
        yield panes.Pane("rejections", id="rejections", classes="stat")
        yield panes.Pane("draft vs verify", id="timing", classes="stat")
        yield panes.Pane("speed", id="speed", classes="stat")
        table = DataTable(id="classes", classes="stat", cursor_type="row", zebra_stripes=True)
        table.border_title = "classes"
        yield table
        decisions = DataTable(id="decisions", classes="stat", cursor_type="row")
        decisions.border_title = "decisions"
        decisions.border_subtitle = "no policy in this session"
        yield decisions
        with VerticalScroll(id="text-box"):
            yield Static(id="text")
        yield Static(panes.legend(), id="legend")
        yield Footer()

    def on_mount(self) -> None:
        text_box = self.query_one("#text-box", VerticalScroll)
        text_box.border_title = "text"
        text_box.anchor()  # stay at the newest text as it grows, unless the user scrolls up
        classes = self.query_one("#classes", DataTable)
        # Fixed widths: columns do not jump about as the figures change.
        for name, width in [("class", 12), ("rounds", 7), ("accept", 6), ("mean len", 8), ("speedup", 7),
                            ("k", 3), ("spec", 4)]:
            classes.add_column(name, width=width, key=name)
        self.query_one("#decisions", DataTable).add_columns("id", "class", "change")
        self.sub_title = self.feed.title
        self.set_interval(DRAIN_INTERVAL_S, self.drain)
        self.refresh_panes()

    def drain(self) -> None:
        """Apply everything buffered since the last tick as one batch, then redraw once."""
        batch = self.feed.drain()
        if batch:
            self.state.apply(batch)
            self.ticks += 1
        ended_unseen = self.feed.done.is_set() and not self._drawn_end
        if not self.paused and (batch or ended_unseen):
            self._drawn_end = self.feed.done.is_set() and not batch  # the feed is over and fully drawn
            self.refresh_panes()

    def refresh_panes(self) -> None:
        self.redraws += 1
        state = self.state
        self.query_one("#acceptance", Static).update(panes.render_acceptance(state, self.metric))
        self.query_one("#speed", Static).update(panes.render_speed(state))
        self.query_one("#rejections", Static).update(panes.render_rejections(state))
        self.query_one("#timing", Static).update(panes.render_timing(state))
        self.query_one("#memory", Static).update(panes.render_memory(state))
        if state.text_version != self._text_version:  # re-render text only when it grew
            self._text_version = state.text_version
            self.query_one("#text", Static).update(panes.render_text(state))
        self._update_classes(panes.class_rows(state))
        self._update_decisions()
        self.sub_title = self._status()

    def _update_decisions(self) -> None:
        table = self.query_one("#decisions", DataTable)
        for d in self.state.decisions[table.row_count:]:
            table.add_row(*panes.decision_row(d), key=str(d.decision_id))
        policy = self.state.policy
        if policy is not None:
            table.border_subtitle = (f"policy {policy.sha256[:8]}" if policy.accepted
                                     else "edit refused: previous policy in force")

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        """Selecting a decision shows the rounds it was based on."""
        if message.data_table.id != "decisions":
            return
        decision = self.state.decisions[int(message.row_key.value)]
        self.notify(panes.render_decision(decision, self.state.cited(decision)), title="decision", timeout=15,
                    markup=False)

    def _update_classes(self, rows: list[tuple[str, ...]]) -> None:
        """Change cells in place; rebuilding the table every tick costs more than the rest."""
        table = self.query_one("#classes", DataTable)
        for row in rows:
            if row[0] not in table.rows:
                table.add_row(*row, key=row[0])
                continue
            for column, value in zip(list(table.columns)[1:], row[1:]):
                if table.get_cell(row[0], column) != value:
                    table.update_cell(row[0], column, value)

    def _status(self) -> str:
        """What is happening first, so it survives a narrow terminal; the session's name last."""
        parts = [f"{self.state.rounds_seen} rounds"]
        if self.state.finished:
            parts.append(f"finished ({self.state.finished.reason})")
        if self.paused:
            parts.append("VIEW PAUSED")
        if self.feed.skipped:
            parts.append(f"view skipped {self.feed.skipped} events")
        if self.feed.error:
            parts.append(self.feed.error)
        parts.append(self.feed.title)
        return " · ".join(parts)

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self.refresh_panes() if not self.paused else setattr(self, "sub_title", self._status())

    def action_cycle_metric(self) -> None:
        self.metric = ACCEPTANCE_METRICS[(ACCEPTANCE_METRICS.index(self.metric) + 1) % len(ACCEPTANCE_METRICS)]
        self.refresh_panes()

    def action_toggle_text(self) -> None:
        self.screen.toggle_class("text-only")

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause or resume the view", "Decoding and logging go on", self.action_toggle_pause)
        yield SystemCommand("Switch acceptance metric", "rate / mean accepted length / α̂", self.action_cycle_metric)
        yield SystemCommand("Text only", "Give the generated text the whole screen", self.action_toggle_text)
        yield SystemCommand("Help", "What every pane shows", self.action_help)
