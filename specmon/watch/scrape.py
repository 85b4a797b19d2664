"""One read of a server's /metrics, as a ServerScraped event: its counters, or the one line that says
why there are none (down, refused, not a /metrics page, no speculative counters)."""

from __future__ import annotations

import time

import httpx

from specmon.errors import SpecmonError
from specmon.events.schema import ServerScraped
from specmon.watch.exposition import NAMES, NotMetrics, kind_of, read, samples

TIMEOUT_S = 5.0  # a server that takes longer to list its counters is as good as down for a watch
PROXY_SAMPLE = "specmon_upstream_up"  # only a specmon proxy's own page has it, from its start (proxy.exported)
UPSTREAM_PAGE = "/upstream/metrics"  # where a specmon proxy relays its upstream's page (proxy.app)
NO_PAGE = (404, 501)  # the server answers, but has no /metrics there


def base_url(text: str, flag: str = "URL") -> str:
    """http(s)://HOST[:PORT][/PREFIX] without a trailing slash or /v1 (the URL clients are given works too)."""
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, TypeError) as exc:
        raise SpecmonError(f"{flag} {text}: not a URL ({exc}); expected http://HOST:PORT") from None
    if url.port is not None and not 0 < url.port < 65536:
        raise SpecmonError(f"{flag} {text}: port {url.port} is not one (1 to 65535)")
    if url.scheme not in ("http", "https") or not url.host or url.query or url.fragment:
        raise SpecmonError(f"{flag} {text}: expected http://HOST:PORT (the server's base URL)")
    path = url.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return str(url.copy_with(path=path or "/")).rstrip("/")


def metrics_url(url: str) -> str:
    """The /metrics address of a server's base URL (a URL that already ends in /metrics is kept)."""
    base = base_url(url)
    return base if base.endswith("/metrics") else f"{base}/metrics"


def client(api_key: str | None = None) -> httpx.Client:
    """The HTTP client a watch reads with; the key goes as `Authorization: Bearer`."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # trust_env off: a watch of 127.0.0.1 must not go through $HTTP_PROXY (the proxy's relay does the same)
    return httpx.Client(headers=headers, timeout=TIMEOUT_S, follow_redirects=True, trust_env=False)


def scrape(
    http: httpx.Client, url: str, kind: str = "auto", session_id: str = "", address: str | None = None
) -> ServerScraped:
    """Read url's /metrics once (or `address`). `kind`: "auto" detects it from the names on the page. A
    failed read is an event too, with `error` set (its one line) and no counters. A specmon proxy's own
    page is per class and side: its upstream's page, at /upstream/metrics, is read instead."""
    address = address or metrics_url(url)
    t = time.time()
    try:
        reply = http.get(address)
    except httpx.HTTPError as exc:
        return _failed(session_id, t, url, kind, f"down: {_why(exc)}")
    if reply.status_code != 200:
        return _failed(session_id, t, url, kind, _status_line(reply.status_code, address))
    try:
        names = samples(reply.text)
    except NotMetrics as exc:
        return _failed(session_id, t, url, kind, f"{address} is not a Prometheus /metrics page ({exc})")
    if PROXY_SAMPLE in names and not address.endswith(UPSTREAM_PAGE):
        return scrape(http, url, kind, session_id, base_url(address.removesuffix("/metrics")) + UPSTREAM_PAGE)
    found = kind_of(names) if kind == "auto" else kind
    if found is None:
        return _failed(session_id, t, url, kind, f"{address} has no llama-server, vLLM or specmon metrics")
    try:
        figures = read(names, found, session_id, t, url)
    except NotMetrics as exc:
        return _failed(session_id, t, url, found, f"{address}: {exc}, not a count")
    if figures.drafts is None:
        figures.error = f"{address} has no speculative-decoding counters: is speculation on?"
    return figures


def _failed(session_id: str, t: float, url: str, kind: str, error: str) -> ServerScraped:
    return ServerScraped(session_id=session_id, t=t, url=url, kind=kind if kind in NAMES else "", error=error)


def _why(exc: httpx.HTTPError) -> str:
    """A transport failure in a few words (httpx's text can be empty or nest the OS error)."""
    if isinstance(exc, httpx.ConnectError):
        text = str(exc)
        return "connection refused" if "refused" in text.lower() else (text or "cannot connect")
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {TIMEOUT_S:g} s"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def no_page(read: ServerScraped) -> bool:
    """The read found the server, but no /metrics page there (_status_line's HTTP 404 or 501)."""
    return read.error.startswith(tuple(f"HTTP {status} " for status in NO_PAGE))


def _status_line(status: int, address: str) -> str:
    if status in (401, 403):
        return f"HTTP {status} from {address}: the server wants an API key (watch: --api-key-file; proxy: --upstream-api-key-file)"
    if status in NO_PAGE:
        return f"HTTP {status} from {address}: no /metrics there (llama-server publishes it only with --metrics)"
    if status == 503:
        return f"HTTP 503 from {address}: not ready (still loading the model?)"
    return f"HTTP {status} from {address}"
