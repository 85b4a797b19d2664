"""`specmon watch URL`: open a driverless session (log, socket, attach), then read the server every
interval under the TUI or printing one line per window, and end with the totals."""

from __future__ import annotations

import functools
import sys
import threading

from specmon.console import wants_tui
from specmon.text import line_width
from specmon.textfile import check_new_log
from specmon.server.auth import read_api_key
from specmon.transport.serve import parse_listen
from specmon.transport.session import observed_header, observer_session
from specmon.tui.beside import beside_view
from specmon.watch.lines import fitted, totals_line
from specmon.watch.poll import Watcher, poll
from specmon.watch.scrape import client, metrics_url


def run_watch(args) -> int:
    metrics_url(args.url)  # a bad address is one line now, before a log is opened
    # serve's reader: a 0600 file of printable ASCII (httpx cannot send other bytes in a header)
    api_key = read_api_key(args.api_key_file).decode() if args.api_key_file else None
    check_new_log(args.log)
    listen = parse_listen(args.listen) if args.listen else None
    tui = wants_tui(args)
    with client(api_key) as http:
        watcher = Watcher(http, args.url, args.kind, publish=lambda ev: None)
        first = watcher.read()  # the header names the server's kind
        kind = first.kind or (args.kind if args.kind != "auto" else "unknown")  # the first read failed
        with observer_session(
            lambda sid: observed_header(sid, "watch", args.url, kind),
            args.log,
            listen=listen,
            viewer=tui,
            rotation=args.rotation,
        ) as session:
            watcher.session_id, watcher.publish = session.session_id, session.channel.publish
            # every interval: on a thread under the app (which drains the session's view; quitting it stops the
            # watch; it shows the server's state from the events, so no lines), else one line per window here
            stop = threading.Event()
            lines = (lambda line: None) if tui else say
            read = functools.partial(poll, watcher, lines, args.interval, args.duration, stop, first)
            try:
                if tui:  # a failure is shown in the title and ends the watch; the totals still follow
                    beside_view(session.view, f"watch {args.url}", read, stop.set, "specmon-watch", "watch")
                else:
                    read()
            finally:  # after a Ctrl-C or SIGTERM too, and the session ends "interrupted"
                say(totals_line(watcher.runs, watcher.failed_reads))
    return 0


def say(line: str) -> None:
    """A line on stdout, wrapped to the terminal (or COLUMNS) at its fields."""
    for part in fitted(line, line_width(sys.stdout)):  # piped: each record stays one line
        print(part, flush=True)
