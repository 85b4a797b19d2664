"""Reading servers specmon does not run (llama-server, vLLM, another specmon serve) through their
/metrics: `scrape(client, url, kind)` gives one ServerScraped event; `detect_kind(text)` says whose
names a page uses. `specmon watch` (command.py) and `specmon proxy` both read upstreams this way."""

from specmon.watch.exposition import KINDS, NAMES, Reading, detect_kind, read, samples
from specmon.watch.scrape import client, metrics_url, scrape

__all__ = ["KINDS", "NAMES", "Reading", "client", "detect_kind", "metrics_url", "read", "samples", "scrape"]
