"""Where a command's models and endpoints come from, checked before any work starts.

A model is a local folder or a hub id; an LLM judge is an HTTP endpoint. One that cannot be used raises
``SourceError``, one line naming it and the fix, before a model loads. Under ``HF_HUB_OFFLINE=1`` a hub id counts
only when it is in the cache.

>>> check_model_source("no/such/folder/here")
Traceback (most recent call last):
...
eval.sources.SourceError: model 'no/such/folder/here' does not exist (no such local folder): pass a local model folder (with config.json) or a hub id (org/name)
"""  # noqa: E501

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import huggingface_hub

HUB_PROBE_TIMEOUT_S = 3.0
ENDPOINT_PROBE_TIMEOUT_S = 5.0
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


class SourceError(ValueError):
    """A model, data set or endpoint that cannot be found or reached; the message is one line naming it and the fix."""


def hub_offline() -> bool:
    """True when the Hugging Face libraries are in offline mode (``HF_HUB_OFFLINE=1`` when they were imported)."""
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def hub_reachable(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub opens within ``timeout_s``; True behind a proxy (it would say nothing)."""
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return True
    url = urlsplit(huggingface_hub.constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _looks_like_path(name: str) -> bool:
    """A name only a local path can be: ``./m``, ``/abs``, ``~/m``, ``a/b/c``, ``C:\\m`` (a hub id is ``org/name``)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name or ":" in name


def _in_hub_cache(name: str, files: Sequence[str], revision: str | None) -> bool:
    for filename in files:
        try:
            if isinstance(huggingface_hub.try_to_load_from_cache(name, filename, revision=revision), str):
                return True
        except ValueError:  # not a valid repo id (HFValidationError)
            return False
    return False


def _on_hub(name: str, files: Sequence[str], revision: str | None) -> bool | None:
    """Whether the hub has one of ``files`` in repo ``name`` (None: the hub did not say, e.g. a gated repo)."""
    for filename in files:
        try:
            if huggingface_hub.file_exists(name, filename, revision=revision):
                return True
        except ValueError:  # not a valid repo id
            return False
        except Exception:  # gated, rate-limited, a proxy's error: transformers will report it with its reason
            return None
    return False


def check_model_source(
    name: str | None, what: str = "model", files: Sequence[str] = ("config.json",), revision: str | None = None
) -> None:
    """Raise ``SourceError`` unless ``name`` is a local folder holding one of ``files`` or a hub id that can be loaded.

    ``what`` names the setting in the message. Only metadata are read; no weight is downloaded.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     check_model_source(folder, "--model")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    eval.sources.SourceError: --model ... is a folder without config.json: pass the folder save_pretrained wrote (or a hub id)
    """  # noqa: E501
    fix = "pass a local model folder (with config.json) or a hub id (org/name)"
    if not name:
        raise SourceError(f"{what} is empty: {fix}")
    path = Path(name).expanduser()
    if path.is_dir():
        if not any((path / f).exists() for f in files):
            raise SourceError(
                f"{what} {name} is a folder without {' or '.join(files)}: pass the folder save_pretrained wrote "
                "(or a hub id)"
            )
        return
    if path.exists():
        raise SourceError(f"{what} {name} is a file, not a model folder: {fix}")
    if _looks_like_path(name):
        raise SourceError(f"{what} {name!r} does not exist (no such local folder): {fix}")
    if _in_hub_cache(name, files, revision):
        return
    unreachable = "HF_HUB_OFFLINE=1 keeps the hub out" if hub_offline() else None
    if unreachable or not hub_reachable():
        raise SourceError(
            f"{what} {name!r} is neither a local folder nor in the Hugging Face cache, and "
            f"{unreachable or 'the hub cannot be reached (offline?)'}: download it first where there is network "
            f"(`hf download {name}`) or pass a local model folder"
        )
    if _on_hub(name, files, revision) is False:
        raise SourceError(
            f"{what} {name!r} is neither a local folder nor a model on the Hugging Face hub (or it is private: "
            f"`hf auth login`): {fix}"
        )


def check_endpoint(
    base_url: str,
    api_key: str | None = None,
    fix: str = "start the server, or pass its base URL",
    what: str = "the server",
    timeout_s: float = ENDPOINT_PROBE_TIMEOUT_S,
) -> dict | None:
    """GET ``{base_url}/models`` of an OpenAI-compatible server: its JSON, or None. ``SourceError`` when nothing answers
    or the key is refused (401/403); ``api_key`` never appears in a message.
    """
    url = base_url.rstrip("/") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    loopback = urlsplit(url).hostname in ("127.0.0.1", "localhost", "::1")  # a local server: no proxy in between
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if loopback else []))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise SourceError(
                f"{what} {base_url} refused the API key (HTTP {error.code} on GET {url}): check the key in the "
                "environment variable the config names"
            ) from None
        return None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise SourceError(f"{what} {base_url} does not answer (GET {url}: {reason}): {fix}") from None
    try:
        return json.loads(body)
    except ValueError:
        return None
