"""`specmon proxy`: an OpenAI-compatible pass-through in front of a server that speculates (llama-server,
vLLM, TabbyAPI). Each chat or completion request is classified by the policy's classes, forwarded byte
for byte (streams included), and logged as a RequestTimed event with what its reply said (evidence); with a plain
upstream beside it, a share of each class goes there, so the advice per class compares like with like."""
