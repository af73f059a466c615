"""Key/value caches that let a model policy prefill only what is new since a conversation's last turn.

`PrefixCache` keeps each live conversation's cache between turns; `left_padded_cache` assembles the
per-row caches of one generation batch into one batch cache that decoding appends to in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

# Key/value caches kept between turns; past this, new conversations are prefilled in full each turn.
DEFAULT_CACHE_BYTES = 2 * 1024**3


class _CachedPrefix:
    """One conversation's key/value cache: the tokens it covers and, per layer, (keys, values)
    tensors of shape [1, heads, len(tokens), head_dim]. `owner` is the conversation object itself:
    holding it keeps its id from being reused while the entry lives."""

    __slots__ = ("owner", "tokens", "layers")

    def __init__(self, owner: Any, tokens: list[int], layers: list[tuple[Any, Any]]):
        self.owner, self.tokens, self.layers = owner, tokens, layers


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two token sequences share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class PrefixCache:
    """Key/value caches of the conversations a policy is continuing, so a turn prefills only what
    is new since the last one (the tool result and the generation cue), not the whole transcript.

    A hit is only a hint: the cached tokens are compared with the freshly tokenised prompt and only
    the shared leading tokens are reused, so a re-rendered assistant message or an edited
    conversation never reuses a stale key/value. A conversation without an entry of its own may
    borrow the prefix of the last new one prefilled (every prompt opens with the same system
    policy and tool schemas). Entries of conversations absent from the latest call are dropped
    (they ended); past `max_bytes`, further conversations are simply not cached.
    """

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: dict[int, _CachedPrefix] = {}
        self._donor: _CachedPrefix | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def keep_only(self, conversations: Sequence[Any]) -> None:
        live = {id(c) for c in conversations}
        self._entries = {key: e for key, e in self._entries.items() if key in live}
        self.bytes = sum(_size(e.layers) for e in self._entries.values())
        if not self._entries:
            self._donor = None

    def lookup(self, conversation: Any, ids: Sequence[int]) -> tuple[int, list[tuple[Any, Any]], bool]:
        """(n, layers, own): the longest cached prefix of `ids` (at most all but its last token,
        whose logits are still needed), its key/value tensors cropped to `n` tokens, and whether
        it came from the conversation's own entry."""
        own = self._entries.get(id(conversation))
        if own is not None and own.owner is not conversation:
            own = None
        best_n, best = 0, None
        for entry in (own, self._donor):
            if entry is not None:
                n = min(common_prefix_length(entry.tokens, ids), len(ids) - 1)
                if n > best_n:
                    best_n, best = n, entry
        if best is None:
            return 0, [], own is not None
        return best_n, [(k[:, :, :best_n], v[:, :, :best_n]) for k, v in best.layers], own is not None

    def store(self, conversation: Any, tokens: list[int], layers: list[tuple[Any, Any]]) -> None:
        old = self._entries.pop(id(conversation), None)
        self.bytes -= _size(old.layers) if old else 0
        size = _size(layers)
        if self.bytes + size <= self.max_bytes:
            self._entries[id(conversation)] = _CachedPrefix(conversation, tokens, layers)
            self.bytes += size

    def lend(self, tokens: list[int], layers: list[tuple[Any, Any]]) -> None:
        """Offer a freshly prefilled prompt as the prefix other new conversations may borrow."""
        self._donor = _CachedPrefix(None, tokens, layers)


def _size(layers: list[tuple[Any, Any]]) -> int:
    return sum(t.numel() * t.element_size() for pair in layers for t in pair)


def left_padded_cache(prefixes: list[list[tuple[Any, Any]]], width: int, room: int) -> Any:
    """One batch cache from per-row caches of different lengths, right-aligned in `width`
    positions (left padding, matching the left-padded input ids; the attention mask hides the
    zeros), with `room` more positions preallocated for the tokens generation appends."""
    from transformers import DynamicCache  # heavy: only a policy that generates needs it

    template = next(p for p in prefixes if p)
    layers = []
    for index, (keys, _values) in enumerate(template):
        layer = _preallocated_layer((len(prefixes), keys.shape[1], width + room, keys.shape[3]), keys)
        for row, prefix in enumerate(prefixes):
            if prefix:
                length = prefix[index][0].shape[2]
                layer.buffers[0][row, :, width - length : width] = prefix[index][0][0]
                layer.buffers[1][row, :, width - length : width] = prefix[index][1][0]
        layer.grow_to(width)
        layers.append(layer)
    cache = DynamicCache()
    cache.layers = layers
    return cache


@lru_cache(maxsize=1)
def _preallocated_layer_class() -> type:
    """`DynamicLayer` that writes new keys/values into preallocated buffers instead of
    concatenating: with a batch of long cached prompts, `torch.cat` of the whole cache at every
    decoded token was most of a batched decode step on CPU (measured)."""
    import torch  # heavy: only a policy that generates needs them
    from transformers.cache_utils import DynamicLayer

    class PreallocatedLayer(DynamicLayer):
        def __init__(self, shape: tuple[int, ...], like: Any):
            super().__init__()
            self.buffers = (like.new_zeros(shape), like.new_zeros(shape))
            self.length = 0
            self.device = like.device
            self.is_initialized = True
            self.grow_to(0)

        def grow_to(self, length: int) -> None:
            if length > self.buffers[0].shape[2]:
                # Out of room (never with the room asked for): double, copying once.
                extra = max(length, 2 * self.buffers[0].shape[2]) - self.buffers[0].shape[2]
                self.buffers = tuple(
                    torch.cat([b, b.new_zeros(*b.shape[:2], extra, b.shape[3])], dim=2) for b in self.buffers
                )
            self.length = length
            self.keys = self.buffers[0][:, :, :length]
            self.values = self.buffers[1][:, :, :length]

        def update(self, key_states, value_states, *args, **kwargs):
            start = self.length
            self.grow_to(start + key_states.shape[2])
            self.buffers[0][:, :, start : self.length] = key_states
            self.buffers[1][:, :, start : self.length] = value_states
            return self.keys, self.values

        def crop(self, tokens_to_remove: int) -> None:
            if tokens_to_remove < 0:
                self.grow_to(self.length + tokens_to_remove)

    return PreallocatedLayer


def _preallocated_layer(shape: tuple[int, ...], like: Any) -> Any:
    """A zeroed cache layer of `shape` ([batch, heads, positions, head_dim]) like tensor `like`."""
    return _preallocated_layer_class()(shape, like)
