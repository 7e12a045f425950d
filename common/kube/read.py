"""Reading lists and watches from the API server as plain JSON, without client models.

kubernetes-asyncio's models cost far more than the JSON for thousands of Nodes (and a Node's
image list is large); `_preload_content=False` hands back the HTTP response, which is read,
checked and parsed here. Used by every list+watch (common/kube/listwatch.py) and by
`explain --kubeconfig`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from common.kube.errors import retry_after

__all__ = ["ApiError", "list_all", "read_json", "watch_events"]

PAGE = 500


class ApiError(Exception):
    """A non-2xx answer: `status` (0 for a broken stream), the server's message, Retry-After."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


async def read_json(response: Any) -> Any:
    """The body of an aiohttp response as JSON; ApiError for a non-2xx status."""
    try:
        body = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        message = body.decode("utf-8", "replace")[:300]
        with contextlib.suppress(ValueError, AttributeError):
            message = str(orjson.loads(body).get("message") or message)
        raise ApiError(response.status, message, retry_after(response.headers))
    return orjson.loads(body)


async def watch_events(response: Any) -> AsyncIterator[Any]:
    """The events of a watch response (`_preload_content=False`), one JSON object per line;
    ApiError for a non-200 status. The response is released when the stream ends.

    Lines are split here, not by aiohttp: one event (a large Node) may exceed its line limit.
    A line the stream broke off inside is dropped; the caller resumes from the last event.
    """
    if response.status != 200:
        await read_json(response)  # raises ApiError with the server's message
    try:
        held: list[bytes] = []  # the start of a line still arriving, chunk by chunk
        async for chunk in response.content.iter_any():
            *ended, rest = chunk.split(b"\n")
            if ended:
                # Join only when a line ends: a 1 MiB event in 64 KiB chunks is joined once.
                ended[0] = b"".join([*held, ended[0]])
                held = []
                for line in ended:
                    if line.strip():
                        yield orjson.loads(line)
            if rest:
                held.append(rest)
    finally:
        response.release()


async def list_all(
    call: Callable[..., Awaitable[Any]], *, page: int = PAGE, **kwargs: Any
) -> tuple[list[dict[str, Any]], str]:
    """Every item of a list call (e.g. CoreV1Api.list_node) and the list's resourceVersion.

    Pages share one snapshot: the resourceVersion of the last page is that of the whole list,
    the one to watch from. `resource_version="0"` asks for the API server's cache (it may
    answer in one page; later pages follow the continue token alone).
    """
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        if token:  # a continue token carries its snapshot; the server refuses both
            kwargs.pop("resource_version", None)
        extra = {"_continue": token} if token else {}
        doc = await read_json(await call(_preload_content=False, limit=page, **extra, **kwargs))
        items.extend(doc.get("items") or [])
        metadata = doc.get("metadata") or {}
        token = metadata.get("continue")
        if not token:
            return items, str(metadata.get("resourceVersion") or "")
