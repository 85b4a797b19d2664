"""The live monitor and its replay. One factory builds them for `run`, `attach`, `replay` and the tests."""

from __future__ import annotations

import time

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.widgets import DataTable, Footer, Static

from specmon.tui import panes, rows
from specmon.tui.feed import View
from specmon.tui.replay_keys import ReplayKeys, replay_bindings
from specmon.tui.requests import render_requests, requests_subtitle, requests_title
from specmon.tui.screens import DecisionScreen, HelpScreen, Overlay
from specmon.tui.state import ACCEPTANCE_METRICS, ViewState

MIN_SIZE = (70, 20)  # below this the panes cannot show their figures whole: say so instead
MIN_SIZE_SERVING = (70, 24)  # a server's requests row needs the rows above it whole too
ROOMY_HEIGHT = 28  # from here on the top panes have FULL_ROWS; below, 3 rows so 5 classes and the text fit
RELOAD_NOTICE_S = 10.0  # a taken reload is news for a while; a refused edit stays until one is taken


class SpecmonApp(View):
    CSS_PATH = "app.tcss"
    State = ViewState
    REPLAY = False
    BINDINGS = [
        Binding("p", "toggle_pause", "pause", tooltip="Stop refreshing panes; decoding and logging go on"),
        Binding("m", "cycle_metric", "metric", tooltip="Switch the acceptance sparkline's metric"),
        Binding("t", "toggle_text", "text", tooltip="Give the generated text the whole screen"),
        Binding("question_mark", "help", "help", tooltip="What every pane shows"),
        Binding("q", "quit", "quit"),
    ]

    metric = ACCEPTANCE_METRICS[0]
    redraws = 0  # pane refreshes: the rate the benchmark reads
    _text_version = -1
    _cursor_class = ""  # the class the classes table's cursor was last moved to
    _reloads_seen = 0  # state.policies_loaded when the notice was last drawn
    _reload_until = 0.0  # monotonic time until which the last reload taken is shown
    _notice = ("", "")  # the notice's title and text as drawn, so an unchanged one is not laid out again

    def compose(self) -> ComposeResult:
        yield panes.TitleBar(self._title, id="title")
        with Grid(id="main"):
            yield self._run_pane(
                "acceptance",
                lambda w: panes.render_acceptance(self.state, self.metric, w),
                lambda w: self._short_foot(
                    "acceptance", panes.sparkline_caption(self.state, self.metric, w, self._columns("acceptance"))
                ),
            )  # a short pane's last line, the sparkline's caption, goes to its foot
            yield self._run_pane(
                "speed",
                lambda w: panes.render_speed(self.state, w, self._rows("speed")),
                lambda w: rows.policy_figure(self.state, w),
            )  # what the policy decided on
            yield self._run_pane(
                "rejections",
                lambda w: panes.render_rejections(self.state, w, self._rows("rejections")),
                lambda w: self._short_foot("rejections", panes.rejections_caption(self.state, w)),
            )
            yield self._run_pane(
                "timing", lambda w: panes.render_timing(self.state, w), lambda w: panes.rounds_caption(self.state), "ms"
            )
            yield panes.Pane(
                "memory", lambda w: panes.render_memory(self.state, self._rows("memory")), id="memory", classes="stat"
            )
            yield DataTable(
                id="classes",
                classes="stat",
                cursor_type="row",
                zebra_stripes=True,
                cell_padding=0,
                cursor_foreground_priority="renderable",
            )  # the cursor keeps the verdict's colour
            yield panes.DecisionsTable(id="decisions", classes="stat", cursor_type="row", cell_padding=0)
            yield panes.Pane(
                "requests",
                lambda w: render_requests(self.state.requests),
                lambda w: requests_title(self.state.requests, w, getattr(self.feed, "url", "")),
                lambda w: requests_subtitle(self.state.requests),
                id="requests",
                classes="stat",
            )
            with VerticalScroll(id="text-box"):
                yield Static(id="text")
        yield Static(id="policy-notice")  # under the grid, full width: a refused edit's reason wraps whole
        yield Static(id="too-small")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        text_box = self.query_one("#text-box", VerticalScroll)
        text_box.border_title = "text"
        text_box.border_subtitle = panes.legend()
        text_box.anchor()  # stay at the newest text as it grows, unless the user scrolls up
        classes = self.query_one("#classes", DataTable)
        classes.border_title = "classes"
        for key, header, width, justify in rows.CLASS_COLUMNS:  # fixed widths: columns do not jump about
            classes.add_column(Text(header, justify=justify), width=width, key=key)
        decisions = self.query_one("#decisions", DataTable)
        decisions.border_title = "decisions"
        decisions.border_subtitle = "no policy"
        for key, width in rows.DECISION_COLUMNS:
            decisions.add_column(key, width=width, key=key)
        decisions.fit_last_column()
        self._fit_to(self.size.width, self.size.height)

    # -- size -----------------------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        self._fit_to(event.size.width, event.size.height)

    def _fit_to(self, width: int, height: int) -> None:
        """Below MIN_SIZE, one line that says so (as btop does) instead of a broken layout."""
        need = MIN_SIZE_SERVING if self.state.requests is not None else MIN_SIZE
        small = width < need[0] or height < need[1]
        screen = self.screen_stack[0] if self.screen_stack else self.screen
        screen.set_class(small, "too-small")
        screen.set_class(height < ROOMY_HEIGHT, "short")  # app.tcss: the top panes give rows to the others
        self._title_notice(screen)
        if small:
            screen.query_one("#too-small", Static).update(
                f"terminal too small: {width}×{height}, need {need[0]}×{need[1]}"
            )

    def _rows(self, pane_id: str) -> int:
        """A pane's content rows as laid out (FULL_ROWS before the first layout)."""
        return self.screen_stack[0].query_one(f"#{pane_id}").content_size.height or panes.FULL_ROWS

    def _columns(self, pane_id: str) -> int:
        """A pane's content columns as laid out (DEFAULT_WIDTH before the first layout)."""
        return self.screen_stack[0].query_one(f"#{pane_id}").content_size.width or panes.DEFAULT_WIDTH

    def _short_foot(self, pane_id: str, caption: str) -> str:
        """A pane's foot: `caption` where the pane is too short for it as its last line."""
        return caption if self._rows(pane_id) < panes.FULL_ROWS else ""

    def refresh_panes(self) -> None:
        self.redraws += 1
        main = self.screen_stack[0]
        grid, serving = main.query_one("#main", Grid), self.state.requests is not None
        if grid.has_class("serving") != serving:  # a server's requests pane has a row from its first QueueSample on
            grid.set_class(serving, "serving")  # a replay that jumps back to before it gives the row to the text
            self._fit_to(self.size.width, self.size.height)
        if self.state.text_version != self._text_version:  # re-render text only when it grew
            self._text_version = self.state.text_version
            main.query_one("#text", Static).update(panes.render_text(self.state))
        self._update_classes(main.query_one("#classes", DataTable))
        self._update_decisions(main.query_one("#decisions", DataTable))
        self._update_notice(main)
        super().refresh_panes()

    def _run_pane(self, pane_id: str, render_to, subtitle_to, what: str = "") -> panes.Pane:
        """A pane over the current class's run, titled `what` (its id unless given) and that round set."""
        what = what or pane_id
        return panes.Pane(
            what, render_to, lambda w: panes.run_title(self.state, what, w), subtitle_to, id=pane_id, classes="stat"
        )

    def _update_decisions(self, table: DataTable) -> None:
        """Add new decisions and follow the newest, unless the user moved the cursor up."""
        before = table.row_count
        following = before == 0 or table.cursor_row >= before - 1
        for d in self.state.decisions[before:]:
            *cells, name = rows.decision_row(d)
            ellipsized = Text(name, no_wrap=True, overflow="ellipsis")  # a cut class name says so
            table.add_row(*cells, ellipsized, key=str(len(table.rows)))
        if table.row_count > before and following:
            table.move_cursor(row=table.row_count - 1, animate=False)
        policy = self.state.policy
        if policy is not None:  # the reason is in the notice under the grid: the pane is too narrow for it
            subtitle = "edit refused" if self.state.refused else f"policy {policy.sha256[:8]}"
            if table.border_subtitle != subtitle:
                table.border_subtitle = subtitle

    def _update_notice(self, main) -> None:
        """A refused edit's whole reason until a reload is taken; a taken reload for RELOAD_NOTICE_S."""
        loaded, seen = self.state.policies_loaded, self._reloads_seen
        self._reloads_seen = loaded
        if loaded < seen:  # a replay folding again from the start: what was shown is not news
            self._reload_until = 0.0
        elif loaded > seen and self.state.reloaded is not None:
            self._reload_until = time.monotonic() + RELOAD_NOTICE_S
            self.set_timer(RELOAD_NOTICE_S + 0.1, self._notice_expired)  # just after: the notice is due to go
        # news for RELOAD_NOTICE_S of the session's time and of ours: a replay read past it no longer shows it
        reload = self.state.reloaded
        recent = reload is not None and self.state.last_t - reload.t < RELOAD_NOTICE_S
        notice = rows.policy_notice(self.state, recent and time.monotonic() < self._reload_until)
        title, body = notice or ("", "")
        if (title, str(body)) == self._notice:
            return
        self._notice = (title, str(body))
        widget = main.query_one("#policy-notice", Static)
        widget.set_class(self.state.refused is not None, "refused")
        widget.set_class(notice is not None, "shown")
        main.set_class(notice is not None, "noticed")  # a short screen gives the notice the text's rows (app.tcss)
        self._title_notice(main)
        widget.update(body)

    def _title_notice(self, main) -> None:
        """The notice's title; spaced by hand on a short screen, whose top border alone has no corner."""
        title, short = self._notice[0], main.has_class("short")
        main.query_one("#policy-notice", Static).border_title = f" {title} " if title and short else title

    def _notice_expired(self) -> None:
        if not self.paused:  # a paused view stays as it was; resuming redraws the notice
            self._update_notice(self.screen_stack[0])

    @on(DataTable.RowSelected, "#decisions")
    def _show_decision(self, message: DataTable.RowSelected) -> None:
        """Selecting a decision shows the rounds it was based on."""
        decision = self.state.decisions[int(message.row_key.value)]
        detail = rows.render_decision(decision, self.state.cited(decision))
        self.push_screen(DecisionScreen(detail, decision.decision_id))

    def _update_classes(self, table: DataTable) -> None:
        """Change cells in place (a rebuild costs more than the rest); the cursor marks the panes' class."""
        columns = list(table.columns)
        for row in rows.class_rows(self.state):
            name = row[0]
            if name not in table.rows:
                table.add_row(*rows.styled_cells(self.state, row), key=name)
                continue
            cells = None
            for i, (column, value) in enumerate(zip(columns[1:], row[1:]), start=1):
                if str(table.get_cell(name, column)) != value:
                    cells = cells or rows.styled_cells(self.state, row)
                    table.update_cell(name, column, cells[i])
        current = self.state.current_class
        if current != self._cursor_class and current in table.rows:  # a new class: it may be off screen
            self._cursor_class = current
            # after the refresh: rows added in this batch have no place yet to scroll to
            self.call_after_refresh(self._cursor_to, table, table.get_row_index(current))

    @staticmethod
    def _cursor_to(table: DataTable, row: int) -> None:
        table.move_cursor(row=row, animate=False)
        # a scroll made while the scrollbar was still appearing leaves its thumb at the top
        table.call_after_refresh(lambda: setattr(table.vertical_scrollbar, "position", table.scroll_y))

    # -- the title -----------------------------------------------------------------------------
    def _title(self, width: int = 0):
        tail = self.feed.title if self.REPLAY else ""  # the replayed file, last, where the width allows
        return rows.status_line(self.state, self.feed.title, self._alerts(), self._lead(), tail, width)

    # -- actions -------------------------------------------------------------------------------
    def action_cycle_metric(self) -> None:
        self.metric = ACCEPTANCE_METRICS[(ACCEPTANCE_METRICS.index(self.metric) + 1) % len(ACCEPTANCE_METRICS)]
        self.refresh_panes()

    def action_toggle_text(self) -> None:
        self.screen_stack[0].query_one("#main", Grid).toggle_class("text-only")
        self.call_after_refresh(self.screen_stack[0].query_one("#text-box", VerticalScroll).scroll_end, animate=False)

    def action_help(self) -> None:
        if not isinstance(self.screen, Overlay):  # one box at a time: help never lies under a decision's
            self.push_screen(HelpScreen(replay=self.REPLAY))

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause or resume the view", "Decoding and logging go on", self.action_toggle_pause)
        yield SystemCommand("Switch acceptance metric", "rate / mean accepted length / α̂", self.action_cycle_metric)
        yield SystemCommand("Text only", "Give the generated text the whole screen", self.action_toggle_text)
        yield SystemCommand("Help", "What every pane shows", self.action_help)


class ReplayApp(ReplayKeys, SpecmonApp):
    """The same monitor, fed from a log: play/pause, step a round, change speed, jump (ReplayKeys)."""

    REPLAY = True
    BINDINGS = replay_bindings("Advance to the next round", "Jump to a round, a prompt or a decision")

    def apply_now(self, batch) -> None:
        if self.feed.restarted:  # a jump back: the text and the tables start again too
            self._text_version = -1
            self._cursor_class = ""
            for table in self.screen_stack[0].query(DataTable):
                table.clear()
        super().apply_now(batch)
