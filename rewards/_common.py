"""Helpers every reward shares: completion text from TRL's plain or conversational form."""

from __future__ import annotations


def completion_text(completion) -> str:
    """The text of one completion: a plain string, or the last assistant message of a conversational one."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        content = completion[-1].get("content") if isinstance(completion[-1], dict) else None
        return content if isinstance(content, str) else ""
    return ""
