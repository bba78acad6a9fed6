"""The block-hash chain of a rendered conversation, and a memo that hashes only what is new.

The rendered conversation (each message's role marker ``<|role|>`` and text, in order) is cut
in blocks of ``block_chars`` characters; block i's hash covers blocks 0..i (a hash chain), so
equal hashes mean equal prefixes.  A partial tail block is left out: a server caches whole
blocks only.

``ChainMemo`` gives the same chain as ``block_chain(render_conversation(body))`` without
rendering or hashing what it has seen: each turn of a conversation resends the previous turn's
messages, and conversations share system prompts.  It remembers, for a request's message list,
the chain of its whole blocks, its partial tail and (shallow copies of) the messages; the next
request looks up the list it most likely extends (its first n-2 messages: the previous turn;
then n-1, n, n-3, n-4, and the first message alone, which is remembered too: a shared system
prompt), keyed by that prefix's length and its last message's role, length and last
characters, and checks it by comparing the message lists (dict equality, in C: some 20x
cheaper than hashing the text).  So a turn hashes only its new messages.  Messages that
compare equal render alike (a role or part text of another type than str aside: ``1 == True``
renders apart; the chain only steers the routing).  Bounded: at most ``max_chars``
characters of remembered prefixes (two generations, as the block table: an LRU to within a
factor 2; a dropped generation is freed a few entries per call, ``fading.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from hybrid_gateway.upstreams.pool.fading import Fading

__all__ = ["ChainMemo", "block_chain", "render_conversation"]

_EDGE = 16  # characters of the end of a message in its memo key (the rest is compared)
# entries of a dropped generation freed per entry kept: a generation holds about as many entries
# as are kept while the next one fills, so it is empty well before the next drop
_FREED_PER_KEEP = 1


def _message(message: object) -> tuple[str, str] | None:
    """A message's role marker and text as the rendering has them; None: not a message."""
    # (dict first: a parsed body's; an ABC check costs more than the rest of the lookup)
    if type(message) is not dict and not isinstance(message, Mapping):
        return None
    content, role = message.get("content"), message.get("role")
    if type(content) is str and type(role) is str:  # the usual message, the short way
        return _MARKERS.get(role) or f"<|{role}|>", content
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):  # content parts: their text, in order
        text = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    else:
        text = ""
    return f"<|{role}|>", text


# the markers of the usual roles, made once (``_message``)
_MARKERS = {role: f"<|{role}|>" for role in ("system", "developer", "user", "assistant", "tool")}


def _messages(body: object) -> list[object]:
    if type(body) is not dict and not isinstance(body, Mapping):
        return []
    messages = body.get("messages")
    return messages if isinstance(messages, list) else []


def render_conversation(body: object) -> str:
    """The conversation as a server's chat template would see its order: role, then text."""
    parts = [m for m in map(_message, _messages(body)) if m is not None]
    return "".join(marker + text for marker, text in parts)


def block_chain(text: str, block_chars: int, previous: int = 0) -> list[int]:
    """Hash of each full block together with every block before it (``previous``: the hash
    of the blocks before ``text``, 0 at the start of the conversation)."""
    chain: list[int] = []
    for start in range(0, len(text) - block_chars + 1, block_chars):
        previous = hash((previous, text[start : start + block_chars]))
        chain.append(previous)
    return chain


class _Prefix:
    """A remembered message list: the chain of its whole blocks, the characters after the last
    whole block, and the messages (shallow copies)."""

    __slots__ = ("chain", "messages", "tail")

    def __init__(self, chain: tuple[int, ...], tail: str, messages: list[object]) -> None:
        self.chain, self.tail, self.messages = chain, tail, messages


_START = _Prefix((), "", [])
_Key = tuple[int, object, int, str]


def _key(length: int, message: object) -> _Key:
    """The memo key of a message list of ``length`` messages ending with ``message``."""
    if type(message) is dict:
        role, content = message.get("role"), message.get("content")
        if type(role) is not str:
            role = None
        if type(content) is str:
            return (length, role, len(content), content[-_EDGE:])
        return (length, role, -1, "")
    return (length, None, -2, "")


def _tries(n: int) -> list[int]:
    """The prefix lengths to look up, likeliest first: the previous turn (an answer and a
    question added), one message added (a tool result), the same list (a retry), then two
    turns back, and the first message (a shared system prompt)."""
    out: list[int] = []
    for k in (n - 2, n - 1, n, n - 3, n - 4, 1):
        if 0 < k <= n and k not in out:
            out.append(k)
    return out


def _copy(message: object) -> object:
    return message.copy() if type(message) is dict else message


class ChainMemo:
    def __init__(self, block_chars: int, max_chars: int) -> None:
        self._block = block_chars
        self._half = max(1, max_chars // 2)
        self._young: dict[_Key, _Prefix] = {}
        self._old: dict[_Key, _Prefix] = {}
        self._young_chars = 0
        self._fading = Fading()  # dropped old generations, freed a few entries a call

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def chain(self, body: object) -> tuple[int, ...]:
        messages = _messages(body)
        n = len(messages)
        known, k = _START, 0
        for length in _tries(n):
            key = _key(length, messages[length - 1])
            found = self._young.get(key)
            if found is None:
                found = self._old.pop(key, None)
                if found is not None:
                    self._keep(key, found)
            if found is not None and found.messages == messages[:length]:
                known, k = found, length
                break
        if k == n:
            return known.chain
        if k == 0 and n > 1:  # the first message alone: often a system prompt others share
            known, k = self._extend(known, messages[:1]), 1
            self._keep(_key(1, messages[0]), known)
        whole = self._extend(known, messages[k:])
        self._keep(_key(n, messages[-1]), whole)
        return whole.chain

    def _extend(self, prefix: _Prefix, added: list[object]) -> _Prefix:
        """``prefix`` followed by the ``added`` messages: only their text is hashed."""
        pieces = [prefix.tail]
        for message in added:
            rendered = _message(message)
            if rendered is not None:
                pieces += rendered
        rest = "".join(pieces)
        block = self._block
        whole = len(rest) - len(rest) % block
        previous = prefix.chain[-1] if prefix.chain else 0
        # (``rest`` whole: the chain covers its whole blocks only, without a copy of them)
        new = block_chain(rest, block, previous) if whole else []
        messages = [*prefix.messages, *map(_copy, added)]
        return _Prefix(prefix.chain + tuple(new), rest[whole:], messages)

    def _keep(self, key: _Key, prefix: _Prefix) -> None:
        if self._young_chars >= self._half:  # the old generation goes; the young one is old now
            self._fading.drop(self._old)
            self._old, self._young, self._young_chars = self._young, {}, 0
        self._fading.step(_FREED_PER_KEEP)
        self._young[key] = prefix
        self._young_chars += len(prefix.chain) * self._block + len(prefix.tail) + 64
