"""Policies that continue sandbox conversations: a transformers model, or a script.

A policy sees a batch of live conversations and returns the next assistant message for each, in
one call (`training.sandbox.rollout.Policy`). Batching is the interface, not an optimisation bolted
on: a model generates every conversation's next turn in one batched decode, which is what makes a
5,000-conversation shadow evaluation affordable. Evaluation runs them on held-out records; traffic
can run the same model as the production agent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from domains.registry import DEFAULT_DOMAIN
from training.checkpoints import load_policy
from training.prefix_cache import DEFAULT_CACHE_BYTES, PrefixCache, left_padded_cache
from training.sandbox.prompting import parse_tool_calls, tool_schemas
from training.sandbox.rollout import Message

DEFAULT_BATCH_SIZE = 64


class ScriptError(LookupError):
    """A scripted policy has no script for the conversation it was asked to continue."""


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
        domain: str = DEFAULT_DOMAIN,
    ):
        if isinstance(model_or_path, (str, os.PathLike)):
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
        self.domain = domain  # whose tool schemas the prompt lists
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
            list(conversation),
            tools=list(tool_schemas(self.tools, self.domain)),
            add_generation_prompt=True,
            tokenize=False,
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
        import torch  # heavy: only a policy that generates needs it

        with torch.inference_mode():
            prefixes = [self._prefill(owner, ids) for owner, ids in zip(owners, batch)]
            width = max(len(ids) for ids in batch)
            pad = self.tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch])
            attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch])
            kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": pad}
            if width > 1:
                # Every row's prompt but its last token is in the cache: generation starts there.
                kwargs["cache"] = left_padded_cache(prefixes, width - 1, self.max_new_tokens)
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
        import torch  # heavy: only a policy that generates needs them
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
