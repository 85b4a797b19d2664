"""specmon: watch speculative decoding live and decide, per prompt class, whether it pays."""

__version__ = "0.1.0"
