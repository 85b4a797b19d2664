"""The client side of `specmon bench serve`, a child process (as real clients are: their parsing must not
hold the server's GIL). Each stdin line is a batch {"texts", "clients", "max_tokens"}; each answer a line."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field


@dataclass
class Streamed:
    request_id: str
    sent: float
    chunks: list[tuple[float, int]] = field(default_factory=list)  # (arrival, round id) of each text chunk
    done: float = 0.0
    tokens: int = 0


def stream(api, text: str, max_tokens: int) -> Streamed:
    result = Streamed("", time.perf_counter())
    for chunk in api.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": text}],
        stream=True,
        max_tokens=max_tokens,
        temperature=0,
        stream_options={"include_usage": True},
    ):
        now = time.perf_counter()
        result.request_id = chunk.id
        if chunk.usage is not None:
            result.tokens = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].delta.content and getattr(chunk, "specmon", None):
            info = chunk.specmon  # a text chunk names its round; the last may carry the request's whole SpecmonInfo
            round_id = info["round_id"] if "round_id" in info else (info.get("round_ids") or [None])[-1]
            if round_id is not None:
                result.chunks.append((now, round_id))
    result.done = time.perf_counter()
    return result


def batch(api, texts: list[str], clients: int, max_tokens: int) -> dict:
    """`texts` shared round-robin among `clients` threads, each streaming its share in turn."""

    def run(share: list[str]) -> tuple[list[Streamed], list[str]]:
        try:
            return [stream(api, text, max_tokens) for text in share], []
        except Exception as exc:  # the parent says it in one line: a lost request must not pass unnoticed
            return [], [f"{type(exc).__name__}: {exc}"]

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        shares = list(pool.map(run, [texts[c::clients] for c in range(clients)]))
    wall = time.perf_counter() - start
    results = [asdict(r) for streamed, _ in shares for r in streamed]
    return {"wall": wall, "results": results, "errors": [e for _, failed in shares for e in failed]}


def main(url: str) -> int:
    import openai

    api = openai.OpenAI(base_url=url + "/v1", api_key="bench", max_retries=0)
    for line in sys.stdin:  # each line is batch's keyword arguments
        print(json.dumps(batch(api, **json.loads(line))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
