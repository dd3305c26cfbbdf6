"""Context budget: token estimates and the truncation policy.

Tokens are estimated at four characters each, scaled by the ratio the server's reported prompt tokens showed on
the previous call, so the estimate follows the real tokenizer once one response has come back.
Truncation keeps the system prompt, the first user message (skill and problem) and the most recent turns, and
drops whole turns from the oldest on, so no tool result is ever separated from the call that produced it.
"""

from __future__ import annotations

import json
from typing import Any

CHARS_PER_TOKEN = 4
# Per-message framing the chat template adds (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    chars = 0
    for m in messages:
        chars += len(m.get("content") or "")
        for call in m.get("tool_calls") or []:
            chars += len(json.dumps(call))
    return chars // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS * len(messages)


def elision_note(dropped: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": f"[{dropped} earlier turn(s) were removed to fit the context window; "
        "their results are in the workspace files. Re-read files instead of relying on memory.]",
    }


def fit_context(
    head: list[dict[str, Any]], turns: list[list[dict[str, Any]]], budget: int, ratio: float = 1.0
) -> tuple[list[dict[str, Any]], int, int] | None:
    """The prompt that fits ``budget`` tokens: (messages, turns dropped, estimated tokens); None if nothing fits.

    ``turns`` are the conversation after ``head``, one list of messages per turn (assistant message, then its tool
    results). At least the latest turn is always kept: without it the model would not see its last results.
    """
    sizes = [estimate_tokens(t) for t in turns]
    head_size = estimate_tokens(head)
    total = head_size + sum(sizes)
    dropped = 0
    while total * ratio > budget and dropped < len(turns) - 1:
        total -= sizes[dropped]
        dropped += 1
        if dropped == 1:
            total += estimate_tokens([elision_note(1)])
    if total * ratio > budget:
        return None
    messages = list(head) + ([elision_note(dropped)] if dropped else [])
    for turn in turns[dropped:]:
        messages.extend(turn)
    return messages, dropped, int(total * ratio)
