"""Prometheus metrics of a serving session, in their own registry (`/metrics`).

The speculative-decoding counters mirror vLLM's (`vllm:spec_decode_num_drafts` and friends) under a
`specmon_` prefix, labelled with the prompt class and the round's k, and are fed from the same
RoundVerified events the log holds, once the request ends and what it sent is known. Each figure
that `specmon log info` shows too is the same count of the same rounds, at every k a class ran at,
except where a client was sent less than the rounds emitted (the log keeps every decoded token; the
cut of a stop string is known only to the reply). log info's per-class table still prints one k per
class (the one with the most rounds); specmon.metrics.stats.class_stats, behind it, holds them all.

    /metrics (per class and k)           definition                          log info
    rounds                               rounds, k = 0 included              rounds
    drafts                               rounds that proposed a draft        rounds - empty (k > 0)
    draft tokens                         Σ proposed                          proposed
    verified accepted                    Σ accepted as the target verified   accepted (rate, mean)
    accepted                             Σ min(accepted, sent) per round     - (sent only)
    per position                         rounds with sent accepted > i       - (a_i: verified, / proposed > i)
    emitted                              Σ tokens sent from rounds           - (the log's tokens less the cut)
    goodput                              tokens the rounds emitted (a stop   tok/s
                                         string's cut included) / round s
    decode tokens, decode seconds        goodput's two sums, as counters     tok/s = tokens / seconds
    round seconds                        Σ draft + verify + overhead ms      (draft, verify: ms per round)
    requests (by finish reason)          requests decoded                    PromptFinished events
    generation tokens                    usage's completion_tokens: sent     - (the log's generated less the cut)

Both goodputs are rates.goodput over the same sums (RunStats.goodput on the log's side)."""

from __future__ import annotations

import math

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specmon.events.schema import AnyEvent, Decision, PolicyLoaded, ResourceSample, RoundVerified
from specmon.metrics import rates

CLASS_K = ["class", "k"]
TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()

        def counter(name: str, help: str, labels=CLASS_K) -> Counter:
            return Counter(name, help, labels, registry=r)

        def gauge(name: str, help: str, labels=()) -> Gauge:
            return Gauge(name, help, labels, registry=r)

        def histogram(name: str, help: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, help, ["class"], buckets=buckets, registry=r)

        self.rounds = counter("specmon_rounds", "Rounds decoded (k = 0: plain decoding steps); log info's rounds")
        self.drafts = counter(
            "specmon_spec_decode_num_drafts",
            "Rounds that proposed at least one draft token; log info's rounds less its empty ones",
        )
        self.draft_tokens = counter(
            "specmon_spec_decode_num_draft_tokens", "Draft tokens proposed; log info's proposed"
        )
        self.accepted = counter(
            "specmon_spec_decode_num_accepted_tokens",
            "Draft tokens accepted and sent (log info's accepted counts those a stop string or max_tokens cut too: "
            "specmon_spec_decode_num_verified_accepted_tokens)",
        )
        self.verified_accepted = counter(
            "specmon_spec_decode_num_verified_accepted_tokens",
            "Draft tokens the target accepted, including those a stop string or max_tokens then cut; log info's accepted",
        )
        self.per_pos = counter(
            "specmon_spec_decode_num_accepted_tokens_per_pos",
            "Rounds whose sent accepted prefix reached past this 0-based position",
            [*CLASS_K, "position"],
        )
        self.emitted = counter(
            "specmon_emitted_tokens",
            "Tokens sent from rounds (accepted + 1 each, less what a stop string or max_tokens cut; the log keeps a "
            "stop string's cut)",
        )
        self.round_seconds = counter("specmon_round_seconds", "Round wall time: draft + verify + overhead")
        # goodput's two sums as counters, in the proxy's names (docs/metrics.md): rate(tokens) / rate(seconds)
        self.decode_tokens = counter(
            "specmon_decode_tokens",
            "Tokens the rounds emitted, as decoded (a stop string's cut included); goodput's numerator",
            [*CLASS_K, "clock"],
        )
        self.decode_seconds = counter(
            "specmon_decode_seconds", "Round time (the server's own clock); goodput's denominator", [*CLASS_K, "clock"]
        )
        self.goodput = gauge(
            "specmon_goodput_tokens_per_second",
            "Tokens the rounds emitted (a stop string's cut included) / round seconds over the session; log info's tok/s",
            CLASS_K,
        )
        self.policy_k = gauge(
            "specmon_policy_draft_len",
            "The longest draft the policy verifies for the class now (its cut table; up to the class's draft_len)",
            ["class"],
        )
        self.policy_on = gauge(
            "specmon_policy_speculate", "1 while the policy has speculation on for the class", ["class"]
        )
        self.decisions = counter(
            "specmon_policy_decisions", "Policy decisions (applied = false: advise mode)", ["class", "applied"]
        )
        self.queue_depth = gauge("specmon_queue_depth", "Requests waiting for the decoder")
        self.running = gauge("specmon_requests_running", "Requests being decoded (batch 1: 0 or 1)")
        self.requests = counter(
            "specmon_requests", "Requests decoded, by how they ended", ["endpoint", "finish_reason"]
        )
        self.refused = counter(
            "specmon_requests_refused", "Requests refused before decoding, by HTTP status", ["status"]
        )
        self.prompt_tokens = counter("specmon_prompt_tokens", "Prompt tokens of decoded requests", ())
        self.generation_tokens = counter(
            "specmon_generation_tokens", "Tokens sent to clients (usage's completion_tokens)", ()
        )
        self.ttft = histogram(
            "specmon_time_to_first_token_seconds",
            "Arrival to the first round's tokens (queue wait included)",
            TTFT_BUCKETS,
        )
        self.per_token = histogram(
            "specmon_time_per_output_token_seconds",
            "Round gap / tokens it emitted, one observation per token after the first round",
            TOKEN_BUCKETS,
        )
        self.rss = gauge("specmon_process_resident_memory_bytes", "Resident memory of the server process")
        self.vram_used = gauge("specmon_vram_used_bytes", "GPU memory in use (NaN: no GPU)")
        self.vram_total = gauge("specmon_vram_total_bytes", "GPU memory in all (NaN: no GPU)")
        # (class, k) -> [tokens the rounds emitted, round ms]: RunStats' emitted and round_ms, without its per-prompt
        # dicts (a server runs for weeks)
        self._sums: dict[tuple[str, str], list[float]] = {}
        for unread in (self.rss, self.vram_used, self.vram_total):
            unread.set(math.nan)

    def observe(self, event: AnyEvent) -> None:
        """Every published event, in the decode thread (a channel callback: a few counter bumps). Rounds
        are counted by count_rounds, when their request ends and what it sent is known."""
        if isinstance(event, Decision):
            self.decisions.labels(event.prompt_class, str(event.applied).lower()).inc()
            if event.applied:
                self.set_policy(event.prompt_class, event.speculate_to, event.k_to)
        elif isinstance(event, PolicyLoaded) and event.classes:  # every class it has, no series for one it dropped
            self.policy_on.clear()
            self.policy_k.clear()
            for cls in event.classes:
                self.set_policy(cls.name, cls.speculate, cls.draft_len)
        elif isinstance(event, ResourceSample):
            for gauge, value in (
                (self.rss, event.rss_bytes),
                (self.vram_used, event.vram_used_bytes),
                (self.vram_total, event.vram_total_bytes),
            ):
                gauge.set(math.nan if value is None else value)

    def count_rounds(self, rounds: list[RoundVerified], sent: int) -> None:
        """A finished request's rounds, in order, of which the first `sent` tokens reached the client."""
        for ev in rounds:
            kept = min(len(ev.emitted), sent)
            sent -= kept
            labels = (ev.prompt_class, str(ev.draft_len))
            proposed, ms = len(ev.proposed), rates.round_ms(ev)
            accepted = min(ev.accepted, kept)  # the kept tokens start with the accepted prefix
            self.rounds.labels(*labels).inc()
            self.emitted.labels(*labels).inc(kept)
            self.round_seconds.labels(*labels).inc(ms / 1e3)
            if proposed:
                self.drafts.labels(*labels).inc()
                self.draft_tokens.labels(*labels).inc(proposed)
                self.accepted.labels(*labels).inc(accepted)
                self.verified_accepted.labels(*labels).inc(ev.accepted)
                for position in range(proposed):  # an offered position's series exists, at 0 until one is accepted
                    self.per_pos.labels(*labels, str(position)).inc(int(position < accepted))
            sums = self._sums.setdefault(labels, [0, 0.0])
            sums[0] += len(ev.emitted)  # as decoded, like log info's tok/s: a stop string's cut is in the log
            sums[1] += ms
            self.decode_tokens.labels(*labels, "server").inc(len(ev.emitted))
            self.decode_seconds.labels(*labels, "server").inc(ms / 1e3)
            value = rates.goodput(sums[0], sums[1])  # RunStats.goodput's definition, over the same rounds
            if value is not None:
                self.goodput.labels(*labels).set(value * 1e3)  # per second: Prometheus' base unit

    def set_policy(self, prompt_class: str, speculate: bool, k: int) -> None:
        self.policy_on.labels(prompt_class).set(1 if speculate else 0)
        self.policy_k.labels(prompt_class).set(k if speculate else 0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
