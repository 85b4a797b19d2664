"""The wire contract: every event specmon emits, as tagged msgspec Structs in one union.

Structs are `array_like`, so they encode as compact arrays. Schema evolution rule: a struct
only ever gains fields at the end, each with a default, so logs written by an older specmon
still decode. Never reorder, rename or remove a field.
"""

from __future__ import annotations

from typing import Literal, Union

import msgspec

FORMAT_VERSION = 2  # 2: numbered frames bound to their log (specmon.events.frames); 1 still reads


class Sampling(msgspec.Struct, array_like=True, frozen=True):
    """Settings applied identically to target (p) and draft (q) distributions."""

    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means no top-k cut
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class Event(msgspec.Struct, array_like=True, tag=True, kw_only=True):
    session_id: str
    t: float  # wall clock, seconds since the epoch


class SessionStarted(Event, tag="session", kw_only=True):
    specmon_version: str
    profile_name: str
    profile_text: str
    backend: str
    target: str
    drafter: str
    dtype: str
    device: str
    host: dict[str, str] = {}
    policy_text: str = ""
    policy_hash: str = ""
    cache_bytes: dict[str, int] = {}  # KV cache size per model ("target", "draft")
    # measured at load under a policy (engine.costs): ms of a target pass over T = 1.. positions, and a
    # model drafter's ms per token; empty in older logs and without a policy
    verify_ms: list[float] = []
    draft_ms: float = 0.0
    verify_disturbed: int = 0  # points of verify_ms the host never let be timed quietly (timed busy instead)
    part: int = 1  # which file of a rotated log this header opens (events.log); 1: the first, or never rotated


BENCH_FIXED_RULE = "bench: fixed k="  # older logs mark `bench policy`'s fixed-k runs in class_rule only
StopReason = Literal["eos", "max_new_tokens", "stop", "cancelled"]  # stop: a stop string (served); cancelled: stopped
Verdict = Literal["identical", "near-tie", "diverged", "sampled", "baseline", "unchecked"]


class PromptStarted(Event, tag="prompt", kw_only=True):
    prompt_id: str
    prompt_class: str
    draft_len: int  # requested k; 0 is plain decoding
    drafter: str
    sampling: Sampling
    prompt_tokens: int
    max_new_tokens: int
    class_rule: str = ""  # why the prompt got its class (e.g. "suite", "file", a policy rule)
    bench_k: int | None = None  # `bench policy`: the fixed k this decode runs beside the policy's; None: not one


def bench_fixed_k(started: PromptStarted) -> int | None:
    """The fixed k of a `bench policy` comparison decode, None for any other (older logs: from class_rule)."""
    if started.bench_k is not None:
        return started.bench_k
    rule = started.class_rule
    return int(rule[len(BENCH_FIXED_RULE) :]) if rule.startswith(BENCH_FIXED_RULE) else None


class RoundVerified(Event, tag="round", kw_only=True):
    """One speculative round. Counts are stored; every ratio is derived in specmon.metrics."""

    round_id: int  # unique within the session; decisions cite these
    prompt_id: str
    prompt_class: str
    round_index: int  # 0-based within the prompt run
    draft_len: int  # requested k
    proposed: list[int]  # draft token ids offered (may be fewer than k, or none)
    accepted: int  # length of the accepted prefix of `proposed`
    rejection_pos: int | None  # index of the first rejected draft token; None if all accepted
    emitted: list[int]  # tokens appended to the output this round (accepted + correction/bonus)
    draft_ms: float
    verify_ms: float
    overhead_ms: float
    target_probs: list[float]  # target probability of each proposed token
    alpha_hat: float | None  # mean over proposed positions of sum_x min(p, q)
    margins: list[float]  # target top-1 minus top-2 logit at each emitted token's position
    sampling: Sampling
    mem_bytes: int  # process memory (RSS) or device memory in use, bytes
    # Added after format 1's first fixture: logs without them decode with "" (schema evolution).
    accepted_text: str = ""  # the accepted draft tokens, detokenized
    final_text: str = ""  # the target's own token (correction or bonus), detokenized
    matched: int = 0  # a confident n-gram draft: the context tokens its match spans (0: other drafts, older logs)
    # ms of the round in which some task on the host waited for a CPU while other processes used one
    # (telemetry.host); None: not measured (older logs, a host without /proc)
    host_stall_ms: float | None = None
    explored: bool = False  # a draft the policy's table cut, verified within the class's budget to learn
    cut: list[int] = []  # a draft the table cut whole, checked against the tokens emitted next (gate.Shadow)


class Equivalence(msgspec.Struct, array_like=True, frozen=True):
    """Did the speculative output equal plain decoding's on this prompt?"""

    verdict: Verdict  # unchecked: decoded under a policy or a server, with no plain run to compare
    first_divergence: int | None = None  # index into the generated tokens
    margin: float | None = None  # plain decoding's top-1 minus top-2 logit there
    near_tie_margin: float = 0.0  # below this a divergence is called a near-tie


class PromptFinished(Event, tag="prompt_done", kw_only=True):
    prompt_id: str
    prompt_class: str
    draft_len: int
    rounds: int
    generated: list[int]
    text: str
    stop_reason: StopReason
    prefill_ms: float
    decode_ms: float  # sum of round times
    equivalence: Equivalence
    drafter: str = ""  # which run this closes, when one prompt runs under several drafters (sweeps)
    sampling: Sampling | None = None


class ResourceSample(Event, tag="resource", kw_only=True):
    rss_bytes: int | None
    vram_used_bytes: int | None
    vram_total_bytes: int | None
    gpu_others: int | None = None  # other processes on the GPU (NVML); None: no GPU, or an older log


class SessionFinished(Event, tag="session_done", kw_only=True):
    """The last event of a session that ended in an orderly way (a killed one has none)."""

    rounds: int
    reason: Literal["done", "interrupted", "error"]


class ClassInForce(msgspec.Struct, array_like=True, frozen=True):
    """A class as the policy in force runs its next prompt."""

    name: str
    speculate: bool
    draft_len: int
    min_match: int = 0  # the n-gram drafter's confidence (0: its plain lookup)


class PolicyLoaded(Event, tag="policy", kw_only=True):
    """A policy took effect (at start or on a hot reload), or an edit was refused."""

    source: str
    sha256: str
    text: str
    accepted: bool  # False: the edit was invalid and the previous policy stays in force
    error: str = ""
    classes: list[ClassInForce] = []  # accepted: every class as it now stands, for its next prompt
    changed: list[str] = []  # a reload: the classes it changed (they start again from the file), "policy" for [policy]


class Recall(msgspec.Struct, array_like=True, frozen=True):
    """Stored evidence a decision stood on (memory.store): what the classes learned in earlier sessions,
    as positions per reach bucket (their age already weighed in, policy.gate.top_up), topping up the
    class's own counts and the session's, as its own rounds do."""

    session_id: str  # the session that learned the class's own ("": none stored for this class)
    rounds: int  # drafts behind the class's own: verified, or cut and settled (gate.Shadow)
    tried: list[float]  # the class's own stored positions taken
    taken: list[float]
    pool_tried: list[float]  # every class's, added to the session's counts
    pool_taken: list[float]


class GateChoice(msgspec.Struct, tag="gate", array_like=True, frozen=True):
    """The live rule's decision (policy.gate): a class's cut table, recomputed from the cited rounds
    with these constants. `kept_*[m]`: tokens a whole draft keeps after a match of m, before and after
    (what the decision changed)."""

    rates: list[float]  # acceptance per reach bucket, as the table was cut from
    tried: list[int]  # the class's own positions tried per bucket (the session's: every cited round)
    taken: list[int]
    steps: list[float]  # a round's cost in plain steps by tokens verified (steps[0] = 1), from the curve
    prior: list[float]  # per bucket, worth prior_weight positions; the session's worth shared_weight
    prior_weight: float
    shared_weight: float
    min_gain: float
    min_match: int  # the shortest n-gram match that drafts
    positional: bool  # a model drafter: reach is the position, no match
    curve_disturbed: int  # timings of the curve above that other work on the host disturbed
    kept_from: list[int]
    kept_to: list[int]
    recalled: Recall | None = None  # stored evidence added to the class's own (None: none was kept, or --fresh)


class StoredReply(msgspec.Struct, array_like=True, frozen=True):
    """A timed reply of an earlier proxy session against the same upstream pair (memory.store), as a
    routing decision cites it: this log holds no RequestTimed of it, so these are the figures taken."""

    session_id: str  # the session it was answered in
    request_id: str
    side: str  # "spec" | "plain"
    clock: str  # what `ms` was timed on: "server" | "proxy" (metrics.served.timing)
    tokens: int
    ms: float


class RouteChoice(msgspec.Struct, tag="route", array_like=True, frozen=True):
    """A proxy's routing decision (policy.route): the class's side before and after, and the
    estimate over the cited requests that moved it."""

    side_from: str  # "both" (alternating, not yet measured) | "spec" | "plain"
    side_to: str
    explore_share: float  # of the class's requests still sent to the other side
    ratio: float  # spec/plain goodput over the cited requests
    low: float | None  # its 95% interval (None: too few requests for one)
    high: float | None
    spec_requests: int
    plain_requests: int
    min_requests: int  # the thresholds it was decided with (routing.*)
    window: int
    clock: str = "server"  # goodputs timed on "server" (its decode time) | "proxy" (metrics.served.timing)
    borrowed: int = 0  # of the cited requests, those of other classes (the class had too few of its own)
    recalled: list[StoredReply] = []  # earlier sessions' replies of the class the estimate also took (memory.store)


class Decision(Event, tag="decision", kw_only=True):
    """The policy changed (or, in advise mode, would change) a class's speculation or k, or, in a
    proxy, the side its requests go to. `rule` holds what it was decided from, typed per rule; None
    in a log decided by a rule since retired (such a log replays; explain and what-if refuse it)."""

    decision_id: int
    prompt_class: str
    speculate_from: bool
    speculate_to: bool
    k_from: int
    k_to: int
    rule_key: str  # the TOML key whose threshold decided, e.g. "policy.min_gain"
    rule_line: int  # its line in the policy file
    # a retired rule's figures, kept in place so an older log still decodes (events are arrays); unread
    retired_inputs: dict[str, float] = {}
    retired_thresholds: dict[str, float] = {}
    round_ids: list[int]  # the rounds it was computed from (a gate decision)
    applied: bool  # False in advise mode
    policy_sha256: str
    reason: str = ""  # the change in words
    match_from: int = 0  # the shortest n-gram match that drafts, before and after (0: none)
    match_to: int = 0
    request_ids: list[str] = []  # a proxy's routing decision cites requests (RequestTimed), not rounds
    rule: GateChoice | RouteChoice | None = None

    @property
    def gate(self) -> GateChoice | None:
        return self.rule if isinstance(self.rule, GateChoice) else None

    @property
    def route(self) -> RouteChoice | None:
        return self.rule if isinstance(self.rule, RouteChoice) else None


class QueueSample(Event, tag="queue", kw_only=True):
    """`specmon serve`'s queue and the request it decodes, written by its decode thread (the session's
    one publisher) when serving starts, when a request leaves the queue for the decoder, when the
    decoder falls idle, and after a round in which requests arrived or left. Only a server writes it."""

    waiting: int  # requests admitted and not yet decoding (the one decoding is not counted)
    request_id: str = ""  # the request decoding now, the prompt_id of its PromptStarted; "" when idle
    endpoint: str = ""  # that request's endpoint: "chat" | "completion"
    arrived: float = 0.0  # wall clock when it joined the queue: its time to first token counts from here


class ServerScraped(Event, tag="scrape", kw_only=True):
    """`specmon watch` (and `proxy`): one read of a server's /metrics. The counters are cumulative, as the
    server reported them; windows and rates come from consecutive scrapes (specmon.metrics.served), and a
    counter that went down means the server restarted. None: the server does not report that figure."""

    url: str
    kind: str  # "llama-server" | "vllm" | "specmon": whose names the figures were read under
    drafts: int | None = None  # spec_decode_num_drafts: verification steps that checked a draft
    draft_tokens: int | None = None  # spec_decode_num_draft_tokens: draft tokens proposed
    accepted: int | None = None  # spec_decode_num_accepted_tokens
    accepted_per_pos: list[int] = []  # spec_decode_num_accepted_tokens_per_pos, position 0, 1, ...
    generation_tokens: int | None = None  # tokens generated (llama-server: tokens_predicted)
    running: int | None = None  # requests decoding now (gauge)
    waiting: int | None = None  # requests queued (gauge)
    error: str = ""  # the read failed (down, not a /metrics page, no counters): the one line the watch said


class RequestTimed(Event, tag="request", kw_only=True):
    """`specmon proxy`: one request passed to an upstream server, classified by the policy, with what the
    upstream's reply said of it (proxy.evidence: llama-server's `timings`, vLLM's `metrics`, TabbyAPI's
    `usage`, in llama-server's names; None where the reply gave none) and the proxy's own clock."""

    request_id: str
    prompt_class: str
    class_rule: str
    upstream: str  # "spec": the server under watch; "plain": the --plain-upstream baseline
    endpoint: str  # "chat" | "completion"
    status: int  # the upstream's HTTP status (0: unreachable)
    stream: bool
    prompt_n: int | None = None
    prompt_ms: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    draft_n: int | None = None  # draft tokens proposed for this request
    draft_n_accepted: int | None = None
    first_byte_ms: float | None = None  # the proxy's arrival to the upstream's first body byte
    total_ms: float | None = None  # the proxy's arrival to the reply's last byte
    # predicted_n / predicted_ms hold any family's generated tokens and its own decode ms (never the proxy's)
    family: str = ""  # whose reply shape was read: "llama-server" | "vllm" | "tabbyapi"; "" none (older logs)
    spec_steps: int | None = None  # verification steps (vLLM's num_spec_steps); None where not given
    accepted_per_pos: list[int] = []  # steps whose accepted prefix reached past position i (vLLM's histogram)
    upstream_url: str = ""  # which upstream of the side's pool answered ("" if none did)
    routed: str = ""  # the side the policy chose, where none of its upstreams answered and `upstream` did
    unmeasured: str = ""  # why the reply's figures were no evidence (out of range: all None above); "" they were


class LogRotated(Event, tag="rotated", kw_only=True):
    """The last event of one part of a rotated log (specmon.events.log): this file was renamed NAME.PART.specmon
    and the session goes on in a new file under the live name, whose preamble carries `next_log_id`."""

    part: int  # this file's number among the session's parts, from 1
    next_name: str  # the live file's name, in this file's directory
    next_log_id: str  # the next part's log id (hex): a follower opens that file and no other


# New event types are added at the end; old logs never contain them and still decode.
AnyEvent = Union[
    SessionStarted,
    PromptStarted,
    RoundVerified,
    PromptFinished,
    ResourceSample,
    SessionFinished,
    PolicyLoaded,
    Decision,
    QueueSample,
    ServerScraped,
    RequestTimed,
    LogRotated,
]

encode = msgspec.msgpack.Encoder().encode  # one event to bytes
decode = msgspec.msgpack.Decoder(AnyEvent).decode  # raises msgspec.DecodeError (or ValidationError) on non-events
