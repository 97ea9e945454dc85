"""Helpers every reward shares: completion text from TRL's plain or conversational form; batches by length."""

from __future__ import annotations


def completion_text(completion) -> str:
    """The text of one completion: a plain string, or the last message of a conversational one ("" if none).

    >>> completion_text("#### 8"), completion_text([{"role": "assistant", "content": "#### 8"}]), completion_text(None)
    ('#### 8', '#### 8', '')
    >>> completion_text([{"role": "assistant", "content": [{"type": "text", "text": "#### 8"}]}])
    '#### 8'
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and completion:
        message = completion[-1]
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # multimodal-style content parts
            return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def length_batches(lengths: list[int], size: int) -> list[list[int]]:
    """The positions of ``lengths`` in batches of ``size``, shortest first: a model pads a batch to its longest, and
    attention costs the square of that (a 15 KB answer beside short ones would pad them all).

    >>> length_batches([9, 1, 5, 2], 2)
    [[1, 3], [2, 0]]
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[i : i + size] for i in range(0, len(order), size)]
