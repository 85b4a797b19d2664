"""Reading servers specmon does not run (llama-server, vLLM, another specmon serve) through their
/metrics: `scrape.scrape(client, url, kind)` gives one ServerScraped event. `specmon watch` (command.py)
and `specmon proxy` both read upstreams this way."""
