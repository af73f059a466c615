"""Policies the evaluator can run: a transformers model, or a script (for tests and baselines).

A policy sees a batch of live conversations and returns the next assistant message for each, in
one call. Batching is the interface, not an optimisation bolted on: a model generates every
conversation's next turn in one batched decode, which is what makes a 5,000-conversation
shadow evaluation affordable.

Messages use the chat format of `training.sandbox.prompting`: `{"role": "assistant", "content": str,
"tool_calls": [{"name": str, "arguments": dict}]}`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from training.sandbox.prompting import parse_tool_calls, tool_schemas

Message = dict[str, Any]

DEFAULT_BATCH_SIZE = 64
# Key/value caches kept between turns; past this, new conversations are prefilled in full each turn.
DEFAULT_CACHE_BYTES = 2 * 1024**3


class Conversation(list):
    """A chat transcript (a list of message dicts) that also knows its task and trial.

    Rollouts hand these to `Policy.act`. A model policy only sees the messages; a scripted policy
    may read `task_id` to look up its per-task script. Being a plain list otherwise keeps the
    `act(list[list[dict]])` seam unchanged for any policy.
    """

    def __init__(self, messages: Sequence[Message] = (), task_id: str | None = None, trial: int = 0):
        super().__init__(messages)
        self.task_id = task_id
        self.trial = trial


class ScriptError(LookupError):
    """A scripted policy has no script for the conversation it was asked to continue."""


@runtime_checkable
class Policy(Protocol):
    """Anything that continues a batch of conversations by one assistant message each."""

    name: str

    def act(self, conversations: list[list[Message]]) -> list[Message]: ...


def assistant_message(content: str = "", tool_calls: Sequence[Mapping[str, Any]] = ()) -> Message:
    """A well-formed assistant message; tool calls copied as `{"name", "arguments"}`."""
    calls = [{"name": str(c["name"]), "arguments": dict(c.get("arguments") or {})} for c in tool_calls]
    return {"role": "assistant", "content": content, "tool_calls": calls}


def _as_message(step: Any) -> Message:
    """Script shorthand: a message dict, a single `{"name", "arguments"}` call, a list of calls, or text."""
    if isinstance(step, str):
        return assistant_message(step)
    if isinstance(step, Mapping) and "name" in step and "role" not in step:
        return assistant_message("", [step])
    if isinstance(step, Mapping):
        return assistant_message(str(step.get("content") or ""), step.get("tool_calls") or ())
    if isinstance(step, Sequence):
        return assistant_message("", list(step))
    raise TypeError(f"cannot read script step {step!r:.200} as an assistant message")


def assistant_turns(conversation: Sequence[Message]) -> int:
    """How many assistant messages the conversation already holds (the scripted step index)."""
    return sum(1 for m in conversation if m.get("role") == "assistant")


class ScriptedPolicy:
    """A policy from a function of one conversation, or from a table of per-task steps.

    The function form sees the whole conversation (tool results included) and may branch on it;
    the table form plays task `task_id`'s steps in order and then answers `final` (a text answer,
    which ends the conversation).

    >>> p = ScriptedPolicy(lambda conv: {"name": "think", "arguments": {"thought": "hm"}}, name="t")
    >>> p.act([[{"role": "user", "content": "hi"}]])[0]["tool_calls"]
    [{'name': 'think', 'arguments': {'thought': 'hm'}}]
    """

    def __init__(self, fn: Callable[[list[Message]], Any], name: str = "scripted"):
        self.fn = fn
        self.name = name
        self.calls = 0  # number of act() invocations, for batching tests and benchmarks

    @classmethod
    def from_table(
        cls,
        table: Mapping[str, Sequence[Any]],
        name: str = "scripted",
        final: str = "Thank you, is there anything else I can help with?",
    ) -> ScriptedPolicy:
        """Per-task steps keyed by task id (a record's `interaction_id` or `task_id`)."""
        steps = {key: [_as_message(s) for s in value] for key, value in table.items()}

        def play(conversation: list[Message]) -> Message:
            task_id = getattr(conversation, "task_id", None)
            if task_id not in steps:
                raise ScriptError(f"policy {name!r} has no script for task {task_id!r}")
            script = steps[task_id]
            index = assistant_turns(conversation)
            return script[index] if index < len(script) else assistant_message(final)

        return cls(play, name=name)

    def act(self, conversations: list[list[Message]]) -> list[Message]:
        self.calls += 1
        return [_as_message(self.fn(conversation)) for conversation in conversations]


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


class HFPolicy:
    """A transformers causal LM with its tokenizer and chat template, generating in batches.

    Prompts are rendered with the tokenizer's chat template and the environment's tool schemas
    (the format the policy was trained on) and decoded up to the end-of-turn token. Greedy by
    default (`temperature=0`); with `temperature > 0` sampling is seeded per call from `seed`, so a
    rerun of the same evaluation reproduces it.

    How a batch is generated, and why (measured on CPU, bench/results/evaluation.md): each prompt
    is prefilled on its own, unpadded (a padded batched prefill leaves SDPA's fast causal kernel and
    was slower than one prefill per row), and only the token-by-token decode runs as one batch,
    where batching pays. With `prefix_cache` each conversation keeps its key/value cache from turn
    to turn, so a turn prefills only the tokens that are new since the last one.

    `model_or_path` is a loaded model (then `tokenizer` is required) or a local folder / hub id
    loaded through `training.checkpoints.load_policy` (which keeps a locally trained tokenizer).
    `batch_size` rows decode together (None: all of a call's conversations at once); it is also
    the `max_live` hint rollouts use to keep that many conversations in flight.
    """

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any = None,
        *,
        name: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
        batch_size: int | None = DEFAULT_BATCH_SIZE,
        sort_by_length: bool = True,
        prefix_cache: bool = True,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        tools: tuple[str, ...] | None = None,
    ):
        if isinstance(model_or_path, (str, os.PathLike)):
            from training.checkpoints import load_policy

            model, loaded_tokenizer = load_policy(model_or_path)
            tokenizer = tokenizer or loaded_tokenizer
            name = name or str(model_or_path)
        else:
            model = model_or_path
            if tokenizer is None:
                raise ValueError("HFPolicy given a model object needs its tokenizer too")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "name_or_path", "") or "hf-policy"
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        self.batch_size = batch_size
        self.sort_by_length = sort_by_length
        self.prefix_cache = prefix_cache
        # The tool list the prompt shows (None: every tool); a policy trained at curriculum level 1
        # saw level 1's short list, and must be evaluated with that same list.
        self.tools = tools
        self.cache = PrefixCache(cache_bytes)
        self.calls = 0
        self.prefilled_tokens = 0  # tokens run through a prefill (the prompt work the cache saves)
        self.context_limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self._stop_ids = self._end_token_ids()

    @property
    def max_live(self) -> int | None:
        """How many conversations a rollout should keep in flight: one decode batch's worth."""
        return self.batch_size

    def _end_token_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
        return {i for i in ids if i is not None}

    def render(self, conversation: Sequence[Message]) -> str:
        """The prompt text for one conversation (chat template + tool schemas + generation cue)."""
        return self.tokenizer.apply_chat_template(
            list(conversation), tools=list(tool_schemas(self.tools)), add_generation_prompt=True, tokenize=False
        )

    def act(self, conversations: list[list[Message]]) -> list[Message]:
        return [self._to_message(text) for text in self.complete(conversations)]

    def complete(self, conversations: list[list[Message]]) -> list[str | None]:
        """The raw generated text of each conversation's next turn, decoded in one batch per
        `batch_size` chunk; None where the prompt no longer fits the model's context."""
        self.calls += 1
        # Conversations not continued in this call have ended: their caches go.
        self.cache.keep_only(conversations if self.prefix_cache else ())
        prompts = [self.render(c) for c in conversations]
        encoded = list(self.tokenizer(prompts, add_special_tokens=False)["input_ids"]) if prompts else []
        order = list(range(len(prompts)))
        if self.sort_by_length:
            # Similar lengths in one batch waste less compute on padding.
            order.sort(key=lambda i: len(encoded[i]))
        texts: dict[int, str | None] = {}
        size = self.batch_size or len(order) or 1
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            fits = [i for i in chunk if not self._too_long(encoded[i])]
            texts.update({i: None for i in chunk if i not in fits})
            if fits:
                texts.update(zip(fits, self._generate([encoded[i] for i in fits], [conversations[i] for i in fits])))
        return [texts[i] for i in range(len(prompts))]

    def _too_long(self, ids: list[int]) -> bool:
        return bool(self.context_limit) and len(ids) + self.max_new_tokens > self.context_limit

    def _generate(self, batch: list[list[int]], owners: list[Any]) -> list[str]:
        import torch

        with torch.inference_mode():
            prefixes = [self._prefill(owner, ids) for owner, ids in zip(owners, batch)]
            width = max(len(ids) for ids in batch)
            pad = self.tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch])
            attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])
            kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad}
            if width > 1:
                # Every row's prompt but its last token is in the cache: generation starts there.
                kwargs["cache"] = _left_padded_cache(prefixes, width - 1, self.max_new_tokens)
            if self.temperature > 0:
                torch.manual_seed(self.seed * 1_000_003 + self.calls)
                kwargs.update(do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0)
            else:
                kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            out = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
            generated = [row[width:].tolist() for row in out]
            if self.prefix_cache and "cache" in kwargs:
                self._keep_caches(owners, batch, generated, kwargs["cache"], width)
        return [self._decode(ids) for ids in generated]

    def _prefill(self, owner: Any, ids: list[int]) -> list[tuple[Any, Any]]:
        """Per layer (keys, values) of `ids[:-1]` for one row, computed unpadded, reusing what the
        prefix cache holds. The last token is left for generation (its logits pick the first
        new token)."""
        import torch
        from transformers import DynamicCache

        reused, layers, own = self.cache.lookup(owner, ids) if self.prefix_cache else (0, [], False)
        todo = ids[reused:-1]
        if not todo:
            return layers
        cache = DynamicCache(ddp_cache_data=layers or None)
        positions = torch.arange(reused, len(ids) - 1).unsqueeze(0)
        self.model(
            input_ids=torch.tensor([todo]), position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
        )
        self.prefilled_tokens += len(todo)
        layers = [(layer.keys, layer.values) for layer in cache.layers]
        if self.prefix_cache and not own:
            self.cache.lend(ids[:-1], layers)
        return layers

    def _keep_caches(
        self, owners: list[Any], batch: list[list[int]], generated: list[list[int]], cache: Any, width: int
    ) -> None:
        """Store each row's own slice of the batch cache: its prompt and the tokens it generated
        up to its stop token (the rest of the row is padding fed after it finished)."""
        for row, (owner, ids, new) in enumerate(zip(owners, batch, generated)):
            stop = next((i for i, t in enumerate(new) if t in self._stop_ids), len(new))
            # The last generated token was never fed back, so it has no key/value yet.
            kept = min(len(new) - 1, stop + 1)
            pad = width - len(ids)
            layers = [
                (
                    layer.keys[row : row + 1, :, pad : pad + len(ids) + kept].clone(),
                    layer.values[row : row + 1, :, pad : pad + len(ids) + kept].clone(),
                )
                for layer in cache.layers
            ]
            self.cache.store(owner, ids + new[:kept], layers)

    def _decode(self, ids: list[int]) -> str:
        for position, token in enumerate(ids):
            if token in self._stop_ids:
                ids = ids[:position]
                break
        # Not skip_special_tokens: tool-call markup may be registered as special in some tokenizers.
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _to_message(self, text: str | None) -> Message:
        if text is None:
            # The prompt no longer fits the model: the conversation ends here, and says why.
            message = assistant_message("")
            message["stop_reason"] = "context_full"
            return message
        content, calls = parse_tool_calls(text)
        return assistant_message(content, calls)


def _left_padded_cache(prefixes: list[list[tuple[Any, Any]]], width: int, room: int) -> Any:
    """One batch cache from per-row caches of different lengths, right-aligned in `width`
    positions (left padding, matching the left-padded input ids; the attention mask hides the
    zeros), with `room` more positions preallocated for the tokens generation appends."""
    from transformers import DynamicCache

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
    import torch
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
