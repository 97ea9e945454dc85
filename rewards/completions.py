"""Helpers every reward shares: completion text from TRL's plain or conversational form."""

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
