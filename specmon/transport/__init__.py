"""Where events travel live: the in-process channel, socket serving and attaching."""
