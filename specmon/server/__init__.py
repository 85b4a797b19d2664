"""`specmon serve`: an OpenAI-compatible HTTP server that is one more scheduler feeding the
session driver. Requests are admitted on the ASGI event loop (protocol, app), queued, and decoded
one at a time by one worker thread (jobs); every round goes to the log, the attach socket, the
client (as a server-sent event) and the Prometheus counters (metrics)."""
