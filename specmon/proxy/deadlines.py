"""How long the proxy waits on an upstream (no imports: `--help` reads these without loading the proxy)."""

IDLE_TIMEOUT_S = 120.0  # no byte from an upstream for this long: it is hung (a slow CPU prefill still sends its head)
WHOLE_REPLY_FACTOR = 10  # a reply not streamed sends nothing until it is decoded: its deadline is this many idle ones
LOOKUP_TIMEOUT_S = 3.0  # a GET passed through (/health, /v1/models) answers in ms; past this, the next member
CONNECT_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 60.0
