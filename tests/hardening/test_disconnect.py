"""A client that hangs up mid-stream frees its channel slot at once.

``narrow-slow`` has one slot and streams its answer over several seconds.  If a hang-up left
the upstream request running, the slot would stay taken until the answer ended and the next
request would wait past the 3 s queue deadline into a 503; freed, the next request gets the
slot within a token's time.  (tests/e2e/test_operations.py checks the other side: the
emulator's engine sees the request cancelled.)
"""

from __future__ import annotations

import aiohttp

from tests.e2e.stack import Gateway

_BODY = {"model": "narrow-slow", "stream": True,
         "messages": [{"role": "user", "content": "take your time"}]}  # fmt: skip


async def _open_and_hang_up(session: aiohttp.ClientSession, url: str) -> int:
    response = await session.post(url, json=_BODY)
    status = response.status
    if status == 200:
        assert (await response.content.readline()).startswith(b"data: ")
    response.close()  # gone, with the answer still streaming
    return status


async def test_hang_up_mid_stream_frees_the_slot_for_the_next_request(
    fuzz_gateway: Gateway,
) -> None:
    url = fuzz_gateway.base_url + "/chat/completions"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        statuses = [await _open_and_hang_up(session, url) for _ in range(3)]
    assert statuses == [200, 200, 200]
