"""SFT warm start: teach a fresh policy the tool-call format from verified trajectories.

A tiny random model never emits a parseable `<tool_call>`, so GRPO would have nothing to compare.
Each recorded conversation whose outcome was verified (it carries gold) is replayed through the
retail environment: the recorded tool calls are re-executed (a call the back end refused with its
retryable fault refused again), the environment's own results (compact when the curriculum level
uses compact results) replace the recorded ones, and the trajectory is kept only when the replay is
a verified success. So SFT sees exactly the format GRPO will produce,
and never a trajectory that fails the verifier. A real instruct model skips this step.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import random
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.settings import setting
from domains.registry import DEFAULT_DOMAIN, load_domain
from training.checkpoints import load_policy, save_final_model
from training.fields import as_dict, tool_results_after
from training.rewards import verified_success
from training.sandbox.core import INJECTED_ERROR
from training.sandbox.environment import call_tool
from training.sandbox.episode import MESSAGE_TOOL
from training.sandbox.prompting import domain_of, tool_schemas
from training.sandbox.rollout import start_conversation
from training.tiny.relabel import customer_names, name_pool, relabel_messages

# Bumped whenever the rendered trajectories change for the same settings (2: compact orders show
# item and payment ids only when an offered tool takes them), so a cached warm start trained on
# the old rendering is not reused.
TRAJECTORY_FORMAT = 2


@dataclass(frozen=True)
class SFTSettings:
    """Warm-start knobs (batch 16 and enough steps copy ids well; batch 32 with half the steps copied them badly)."""

    steps: int = setting(300, "optimizer steps of the warm start")
    batch_size: int = setting(16, "conversations per optimizer step")
    learning_rate: float = setting(1e-3, "peak learning rate (cosine schedule by default)")
    max_length: int = setting(3072, "tokens per rendered conversation; TRL truncates longer ones")
    seed: int = setting(0, "seeds the relabelling and TRL")
    # A record's own `compact` (as a curriculum row carries) wins, so one step can imitate
    # conversations of two forms: the level-1 tasks' short results beside the served shop's.
    compact: bool = setting(
        True,
        "render tool results in the environment's short form, as GRPO and evaluation see them "
        "(a record's own `compact` field overrides it)",
    )
    # OpenMP threads spin-wait, so when other processes share the cores one thread is far faster.
    torch_threads: int | None = setting(None, "CPU threads for torch (None: torch's default)")
    # The tiny model trains faster on the CPU than it moves to and from an accelerator; a real
    # model's supervised step (a GPU preset's) sets it false.
    use_cpu: bool = setting(True, "train on the CPU even when an accelerator is present")
    # TRL's SFT default (True) recomputes activations: about 25% slower, and no memory to save at 1M params.
    gradient_checkpointing: bool = setting(False, "recompute activations in the backward pass to save memory")
    # training.curriculum.tools_for_levels gives the list a level's GRPO run and evaluation use,
    # so SFT must render the same one.
    tools: tuple[str, ...] | None = setting(None, "the tools listed in the prompt (None: all)")
    lr_scheduler_type: str = setting("cosine", "TRL's learning-rate schedule")
    # False clones the logged behaviour as it is, mistakes included: a warm start that imitates an
    # imperfect production agent, which is what behaviour cloning from a real log gives and what the
    # learning benchmark measures GRPO's improvement over.
    verified_only: bool = setting(True, "train only on trajectories the verifier passes (False: every logged one)")
    # For a freshly built tiny policy, which otherwise memorises the training customers' ids; a real
    # base model does not need it.
    relabel: bool = setting(
        False,
        "train on relabelled copies (training.tiny.relabel), a fresh copy per example drawn, so identifiers "
        "can be fitted only by copying them",
    )
    # A domain's interchangeable identifier openings (`Domain.interchangeable_prefixes`, retail: a
    # payment method's source) swapped per relabelled copy: the shop stage's agent named the
    # commonest source in every proposal, whichever the customer said. Off by default: level-1 reads
    # show an order's payment ids too, and the copies the shipped agent and the weekly step train
    # on stay drawn as they always were.
    relabel_swaps_prefixes: bool = setting(
        False, "relabelled copies also swap the domain's interchangeable identifier openings (payment sources)"
    )
    # Which tool to call is a token or two of a conversation, so a token-mean loss barely sees it:
    # the shipped tiny agent fitted its demonstrations to 0.02 a token while answering every
    # cancellation with the order's status (bench/results/shipped_agent.md, S7). Weighting the
    # tokens that name the tool makes the choice count; weighting whole tool calls did not, since
    # they are most of what an agent writes.
    tool_name_weight: float = setting(
        1.0, "loss weight of the tokens naming the tool in an assistant's tool call, against 1 for the rest"
    )
    # An argument that takes one of a few phrases (a cancel reason) is a choice of one token once
    # each phrase is a token of its own (training.tiny.phrases), as small in the mean as the tool's
    # name was; the same weight makes it count.
    weighted_phrases: tuple[str, ...] = setting(
        (), "phrases, each one token of the tokenizer, whose labelled tokens count tool_name_weight times too"
    )
    # What a message to the customer says first is a decision too where two intents reach the same
    # call (after a read: propose the cancellation, or tell the status); `tool_name_positions`.
    weighted_message_opening: bool = setting(
        False, "count a message's tokens through its first word tool_name_weight times too, as the tool's name"
    )
    # Whether a call goes on to another argument or closes is one token after a value (the tiny
    # tokenizer writes `", "reason": "` or `"}}` after an order id), as small in the mean as the
    # tool's name; `argument_end_positions`. In the recipe's shop stage a cancellation's call went
    # on to the reason in 27 of 36 teacher-forced calls without it, 36 of 36 with it.
    weighted_argument_ends: bool = setting(
        False,
        "count the tokens where a tool call's argument ends (the next begins or the call closes) "
        "tool_name_weight times too",
    )

    def __post_init__(self) -> None:
        weight = self.tool_name_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ValueError(f"tool_name_weight={weight!r} must be a number > 0")
        phrases = self.weighted_phrases
        if isinstance(phrases, str) or not all(isinstance(p, str) and p.strip() for p in phrases):
            raise ValueError(f"weighted_phrases={phrases!r} must be a tuple of non-empty strings")
        if phrases and weight == 1.0:
            raise ValueError(f"weighted_phrases={phrases!r} count tool_name_weight times, and tool_name_weight is 1")
        for name in ("weighted_message_opening", "weighted_argument_ends"):
            if getattr(self, name) and weight == 1.0:
                raise ValueError(f"{name} counts tool_name_weight times, and tool_name_weight is 1")


def chat_tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A contract tool call `{name, arguments}` in the chat-template form."""
    arguments = as_dict(call.get("arguments")) or {}
    return {"type": "function", "function": {"name": call["name"], "arguments": arguments}}


class UnreplayableError(ValueError):
    """A record whose world cannot start a conversation: its domain's environment refused the
    record's `initial_state` (or the sandbox its row), so none of its turns can be re-run."""


def _started(record: Mapping[str, Any], compact: bool, seed: int, tools: tuple[str, ...] | None) -> Any:
    """The record's conversation, started; UnreplayableError when its world cannot hold it.

    A domain's environment refuses a state it cannot hold with ValueError or TypeError
    (`domains.api`: the retail world's schema check, an airline state that is not an object of
    tables); a stored record's state is whatever its producer logged, so one such record must
    only be left out of what is imitated, never stop the week."""
    own = record.get("compact")
    try:
        return start_conversation(record, seed, compact=own if isinstance(own, bool) else compact, tools=tools)
    except (ValueError, TypeError) as err:
        raise UnreplayableError(
            f"record {record.get('interaction_id', '?')}: its world cannot start a conversation: "
            f"{type(err).__name__}: {str(err)[:300]}"
        ) from err


def _replayed_turns(
    record: Mapping[str, Any], compact: bool, seed: int, tools: tuple[str, ...] | None
) -> Iterator[tuple[Any, list[dict]]]:
    """Re-run the record's assistant messages in the environment offering `tools` (None: all), one
    at a time: after each, (the environment, the trajectory so far). Recorded tool results and
    replies are replaced by the environment's; a plain-text message ends the run, as it ends a
    rollout in TRL's tool loop, and so does the environment saying it is done. Raises
    UnreplayableError when the record's world cannot start a conversation."""
    conversation = _started(record, compact, seed, tools)
    env, messages = conversation.env, conversation.messages
    opened = False
    recorded = list(record.get("messages") or ())
    for index, message in enumerate(recorded):
        role = message.get("role")
        if role == "user" and not opened:
            opened = True  # the opening message is already in the prompt
            continue
        if role != "assistant":
            continue
        calls = message.get("tool_calls") or []
        if not calls:
            messages.append({"role": "assistant", "content": message.get("content") or ""})
            yield env, messages
            return
        messages.append(
            {
                "role": "assistant",
                "content": message.get("content") or "",
                "tool_calls": [chat_tool_call(c) for c in calls],
            }
        )
        faulted = _faulted_calls(recorded, index, len(calls))
        for call, fault in zip(calls, faulted):
            # A call the back end refused in production is refused again, so the retry after it
            # is learnt as the answer to a fault (a replay that answered it would teach making
            # every call twice).
            result = call_tool(env, call["name"], as_dict(call.get("arguments")) or {}, fault=fault)
            messages.append({"role": "tool", "name": call["name"], "content": result})
        yield env, messages
        if env.done:
            return


def _faulted_calls(messages: list[Mapping[str, Any]], index: int, calls: int) -> list[bool]:
    """For each of the `calls` tool calls of the assistant message at `index`: whether its recorded
    result (the tool messages right after it, in order) is the back end's retryable fault."""
    results = [result.get("content") == INJECTED_ERROR for result in tool_results_after(messages, index, calls)]
    return results + [False] * (calls - len(results))


def replay_trajectory(
    record: Mapping[str, Any],
    compact: bool = True,
    seed: int = 0,
    tools: tuple[str, ...] | None = None,
    verified_only: bool = True,
) -> list[dict] | None:
    """The record's conversation re-run in the environment offering `tools` (None: all), or None
    when it does not verify and `verified_only` (a call to a withheld tool fails like any unknown tool).
    Raises UnreplayableError when the record's world cannot start a conversation."""
    last = deque(_replayed_turns(record, compact, seed, tools), maxlen=1)
    if last:
        env, messages = last[0]
    else:  # no assistant message: only the prompt
        conversation = _started(record, compact, seed, tools)
        env, messages = conversation.env, conversation.messages
    if messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
        messages.append({"role": "assistant", "content": "Thank you."})
    return messages if not verified_only or verified_success(env.episode) else None


def turns_until_done(
    record: Mapping[str, Any], compact: bool = True, seed: int = 0, tools: tuple[str, ...] | None = None
) -> tuple[int, list[dict]] | None:
    """(how many of the record's assistant messages after its opening it took until the replay
    first verified as a success, the trajectory to that point), or None when it never does.
    Raises UnreplayableError when the record's world cannot start a conversation."""
    for turns, (env, messages) in enumerate(_replayed_turns(record, compact, seed, tools), start=1):
        if verified_success(env.episode):
            return turns, messages
    return None


def _replayed(
    records: Iterable[Mapping[str, Any]], compact: bool, tools: tuple[str, ...] | None, verified_only: bool
) -> list[tuple[list[dict], tuple[str, ...]]]:
    """(trajectory, customer names) for every replayable record with gold (a record whose world
    cannot start a conversation is none: `UnreplayableError`)."""
    out = []
    for record in records:
        if not as_dict(record.get("gold")):
            continue
        try:
            messages = replay_trajectory(record, compact=compact, tools=tools, verified_only=verified_only)
        except UnreplayableError:
            continue
        if messages is not None:
            out.append((messages, customer_names(record)))
    return out


def sft_rows(
    records: Iterable[Mapping[str, Any]],
    compact: bool = True,
    tools: tuple[str, ...] | None = None,
    verified_only: bool = True,
    relabelled: int = 0,
    seed: int = 0,
    swap_prefixes: bool = False,
) -> list[dict[str, Any]]:
    """`{"messages", "tools"}` rows for TRL's SFTTrainer from every replayable record with gold
    (only the verified ones when `verified_only`); the prompt lists `tools` (None: every tool).
    `relabelled` > 0: that many rows instead, relabelled copies of the trajectories in turn
    (training.tiny.relabel; names drawn from the replayed customers' own; with `swap_prefixes` the
    domain's interchangeable identifier openings swapped too)."""
    records = list(records)
    replayed = _replayed(records, compact, tools, verified_only)
    return _rows(replayed, tools, relabelled, seed, _domain(records), swap_prefixes)


def _domain(records: list[Mapping[str, Any]]) -> str:
    """The one domain of a training set (every record of a week's window shares it)."""
    found = {domain_of(dict(r)) for r in records} or {DEFAULT_DOMAIN}
    if len(found) > 1:
        raise ValueError(f"records of several domains in one training set: {sorted(found)}")
    return found.pop()


def _rows(
    replayed: list[tuple[list[dict], tuple[str, ...]]],
    tools: tuple[str, ...] | None,
    relabelled: int,
    seed: int,
    domain: str = DEFAULT_DOMAIN,
    swap_prefixes: bool = False,
) -> list[dict[str, Any]]:
    tools_json = json.dumps(list(tool_schemas(tools, domain)))
    if not relabelled or not replayed:
        return [{"messages": messages, "tools": tools_json} for messages, _ in replayed]
    pool, rng = name_pool(names for _, names in replayed), random.Random(seed)
    groups = load_domain(domain).interchangeable_prefixes if swap_prefixes else ()
    return [
        {"messages": relabel_messages(*replayed[i % len(replayed)], pool, rng, groups), "tools": tools_json}
        for i in range(relabelled)
    ]


def tokenized_rows(tokenizer, rows: list[dict[str, Any]]) -> list[dict[str, list[int]]]:
    """`input_ids` + `assistant_masks`, rendered here rather than by SFTTrainer.

    Arrow (datasets) unifies the tool calls' `arguments` dicts across rows into one struct, so a
    `{"email": ...}` call would come back as `{"email": ..., "order_id": None, "reason": None, ...}`
    and the policy would learn to emit those nulls. Tokenizing the Python dicts first leaves Arrow
    only lists of integers to hold.
    """
    from trl.chat_template_utils import get_training_chat_template

    template = get_training_chat_template(tokenizer)
    out = []
    for row in rows:
        encoded = tokenizer.apply_chat_template(
            row["messages"],
            tools=json.loads(row["tools"]),
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        out.append({"input_ids": list(encoded["input_ids"]), "assistant_masks": list(encoded["assistant_masks"])})
    return out


TOOL_CALL_OPEN = "<tool_call>"
_NAMED = re.compile(r'"name"\s*:\s*"[^"]*"')
_NAME_TOKENS_AT_MOST = 16  # a tool name cut finer than this is not a name a model could call
# A message's first word: through the first run of word characters after `"message": "`.
_MESSAGE_OPENED = re.compile(r'"message"\s*:\s*"\W*\w+')
_OPENING_TOKENS_AT_MOST = 24


def tool_name_positions(token_ids, tokenizer, message_opening: bool = False):
    """A boolean tensor like `token_ids` (batch x length): True on each `<tool_call>` marker and on
    the tokens after it up to the one that closes the call's `"name": "..."`. A tokenizer cuts
    that text as it likes (the tiny one merges the name with the arguments' first key into one
    token), so the span is found by decoding, not by matching token ids.

    `message_opening`: in a call of the message tool (`MESSAGE_TOOL`), also the tokens after the
    name through the message's first word. After reading an order a whole-shop agent's next call
    is a message for two intents alike (a cancellation proposed, a status told), so what it says
    first is that decision, as the tool's name is elsewhere."""
    import torch

    marked = torch.zeros_like(token_ids, dtype=torch.bool)
    opener = tokenizer.convert_tokens_to_ids(TOOL_CALL_OPEN)
    if opener is None or opener == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no {TOOL_CALL_OPEN} token: tool calls cannot be found")
    for row, column in (token_ids == opener).nonzero().tolist():
        ids = token_ids[row].tolist()
        end = min(len(ids), column + 1 + _NAME_TOKENS_AT_MOST)
        for stop in range(column + 1, end):
            named = _NAMED.search(tokenizer.decode(ids[column + 1 : stop + 1]))
            if named:
                marked[row, column : stop + 1] = True
                if message_opening and named.group(0).endswith(f'"{MESSAGE_TOOL}"'):
                    marked[row, stop + 1 : _opening_end(ids, column, stop, tokenizer)] = True
                break
    return marked


def _opening_end(ids: list[int], column: int, stop: int, tokenizer) -> int:
    """The position after the first word of the message whose call opens at `column` and whose
    name ends at `stop`; `stop + 1` (nothing more) when no first word is found close by."""
    for end in range(stop + 1, min(len(ids), stop + 1 + _OPENING_TOKENS_AT_MOST)):
        if _MESSAGE_OPENED.search(tokenizer.decode(ids[column + 1 : end + 1])):
            return end + 1
    return stop + 1


def phrase_token_ids(tokenizer, phrases: Iterable[str]) -> tuple[int, ...]:
    """The token of each phrase; ValueError naming a phrase that is not a token of its own.

    Only an added token (`training.tiny.phrases.add_phrase_tokens`) is cut whole wherever it
    appears: a BPE token that spells the phrase alone may be merged with the text around it in a
    call (the tiny tokenizer holds "no longer needed" alone, yet cuts the call's reason into
    `", "reason": "no longer needed"}}`)."""
    added = tokenizer.get_added_vocab()
    missing = [phrase for phrase in phrases if phrase not in added]
    if missing:
        raise ValueError(
            f"weighted phrases {missing} are not tokens of their own in this tokenizer "
            "(training.tiny.phrases.add_phrase_tokens makes them so)"
        )
    return tuple(added[phrase] for phrase in phrases)


TOOL_CALL_CLOSE = "</tool_call>"
_ARGUMENTS_OPENED = re.compile(r'"arguments"\s*:\s*\{')


def argument_ends(call: str) -> list[int]:
    """The character offsets in a tool call's text (`{"name": ..., "arguments": {...}}`) where an
    argument ends: each `,` between two arguments and the `}` that closes the arguments. Commas
    and braces inside a value (a string, a list of item ids) are not ends; a call cut off before
    its arguments close has the ends written so far."""
    opened = _ARGUMENTS_OPENED.search(call)
    if opened is None:
        return []
    ends: list[int] = []
    depth, in_string, escaped = 1, False, False
    for at in range(opened.end(), len(call)):
        char = call[at]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                ends.append(at)
                break
        elif char == "," and depth == 1:
            ends.append(at)
    return ends


def _token_ends(ids: list[int], tokenizer) -> list[int]:
    """The end offset of each token's text in the decoded text of `ids`. Decoded one token at a
    time where that spells the same text (an ASCII call); else prefix by prefix, where a character
    spans two tokens."""
    pieces = tokenizer.batch_decode([[token] for token in ids])
    if "".join(pieces) == tokenizer.decode(ids):
        return list(itertools.accumulate(len(piece) for piece in pieces))
    return [len(tokenizer.decode(ids[: k + 1])) for k in range(len(ids))]


def argument_end_positions(token_ids, tokenizer):
    """A boolean tensor like `token_ids` (batch x length): True on each token, between a
    `<tool_call>` marker and its `</tool_call>`, whose text holds an argument's end
    (`argument_ends`). Whether a call goes on to another argument or closes is decided there: the
    tiny tokenizer writes a cancellation's order id and then one token, `", "reason": "` or
    `"}}`."""
    import torch

    marked = torch.zeros_like(token_ids, dtype=torch.bool)
    opener, closer = (tokenizer.convert_tokens_to_ids(token) for token in (TOOL_CALL_OPEN, TOOL_CALL_CLOSE))
    for row, column in (token_ids == opener).nonzero().tolist():
        ids = token_ids[row].tolist()
        stop = next((at for at in range(column + 1, len(ids)) if ids[at] in (closer, opener)), len(ids))
        span = ids[column + 1 : stop]
        ends = _token_ends(span, tokenizer)
        for offset in argument_ends(tokenizer.decode(span)):
            marked[row, column + 1 + bisect.bisect_right(ends, offset)] = True
    return marked


def weighted_positions(
    token_ids,
    tokenizer,
    phrase_ids: tuple[int, ...] = (),
    message_opening: bool = False,
    argument_end: bool = False,
):
    """`tool_name_positions` (with `message_opening`), and True on every token of `phrase_ids`,
    and with `argument_end` on `argument_end_positions`, too."""
    marked = tool_name_positions(token_ids, tokenizer, message_opening)
    for token in phrase_ids:
        marked |= token_ids == token
    if argument_end:
        marked |= argument_end_positions(token_ids, tokenizer)
    return marked


def _trainer_class(
    tool_name_weight: float = 1.0,
    phrase_ids: tuple[int, ...] = (),
    message_opening: bool = False,
    argument_end: bool = False,
):
    """TRL's SFTTrainer, with a loss that sends only the trained positions through the LM head.

    TRL computes log-probabilities, entropy and top-1 for every position of the batch in fp32
    tiles (its fused LM head). On CPU with a tiny model that was 70% of a step (profiled: 1.1 of
    1.6 s for batch 16 x ~360 tokens, the transformer body 0.15 s forward), though only the
    assistant positions (a fifth of them) carry loss. Here the body runs once, the LM head sees the
    labelled positions only, and the loss is the same token-mean negative log-likelihood. The same
    two metrics TRL logs (token accuracy, entropy) come from those positions: 2.2x faster steps
    (`bench/sft_step.py`), the same loss and gradient (tests/test_sft.py). With several
    processes, or when outputs are asked for, TRL's own path runs (its distributed bookkeeping).

    With `tool_name_weight` != 1 the loss is the weighted mean: each labelled token that opens a
    tool call or names its tool (`tool_name_positions`; with `message_opening`, through a message's
    first word), or is one of `phrase_ids`, or (with `argument_end`) ends an argument of a call,
    counts that many times. TRL's own path has no weights,
    so it is refused then.
    """
    import torch
    import torch.nn.functional as F
    from trl import SFTTrainer

    class LabelledPositionsSFTTrainer(SFTTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if return_outputs or self.accelerator.num_processes > 1 or not hasattr(model, "get_decoder"):
                if tool_name_weight != 1.0:
                    raise ValueError("tool_name_weight needs the single-process loss; TRL's own path has no weights")
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            target = inputs["labels"][:, 1:]
            keep = target != -100
            hidden = model.get_decoder()(
                input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"), use_cache=False
            ).last_hidden_state
            logits = model.get_output_embeddings()(hidden[:, :-1][keep]).float()
            wanted, count = target[keep], keep.sum().clamp(min=1)
            if tool_name_weight == 1.0:
                loss = F.cross_entropy(logits, wanted, reduction="sum") / count
            else:
                named = weighted_positions(
                    inputs["input_ids"][:, 1:], self.processing_class, phrase_ids, message_opening, argument_end
                )[keep]
                weights = 1.0 + (tool_name_weight - 1.0) * named.float()
                loss = (F.cross_entropy(logits, wanted, reduction="none") * weights).sum() / weights.sum()
            mode = "train" if model.training else "eval"
            with torch.no_grad():
                log_probs = logits.log_softmax(-1)
                self._metrics[mode]["mean_token_accuracy"].append(float((logits.argmax(-1) == wanted).sum() / count))
                self._metrics[mode]["entropy"].append(float(-(log_probs.exp() * log_probs).sum() / count))
            if mode == "train" and "attention_mask" in inputs:
                self._total_train_tokens += int(inputs["attention_mask"].sum())
                self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            return loss

    return LabelledPositionsSFTTrainer


class NoTrajectoriesError(ValueError):
    """No record replayed into a verified trajectory: nothing to warm-start on."""


class ConversationLengthError(ValueError):
    """No rendered conversation has an assistant token within `max_length`: every one would be cut
    before anything the policy says, so a step would learn nothing."""


def rows_cut(tokenized: list[dict[str, list[int]]], max_length: int) -> int:
    """How many of `tokenized_rows`' rows are longer than `max_length` (TRL keeps their first
    `max_length` tokens and the turns after are never learnt). ConversationLengthError when no
    row keeps an assistant token: the prompt alone (the policy and the offered tools' schemas) is
    that long, which TRL would only report as an empty dataset."""
    if not any(1 in row["assistant_masks"][:max_length] for row in tokenized):
        first = min((row["assistant_masks"].index(1) for row in tokenized if 1 in row["assistant_masks"]), default=None)
        raise ConversationLengthError(
            f"max_length {max_length}: none of {len(tokenized)} conversations has an assistant token within it "
            f"(the first one starts at token {first}: the policy and the offered tools' schemas come before it); "
            "offer fewer tools (the curriculum's tool_list) or raise max_length"
        )
    return sum(len(row["input_ids"]) > max_length for row in tokenized)


def warm_start(
    base_path: str | os.PathLike,
    records: Iterable[Mapping[str, Any]],
    out_path: str | os.PathLike,
    settings: SFTSettings = SFTSettings(),
    report: Any = None,
) -> dict[str, Any]:
    """SFT the model at `base_path` on verified trajectories; save to `out_path`; a summary dict."""
    from datasets import Dataset
    from trl import SFTConfig

    if settings.torch_threads:
        import torch

        torch.set_num_threads(settings.torch_threads)
    records = list(records)
    replayed = _replayed(records, settings.compact, settings.tools, settings.verified_only)
    relabelled = settings.steps * settings.batch_size if settings.relabel else 0
    rows = _rows(replayed, settings.tools, relabelled, settings.seed, _domain(records), settings.relabel_swaps_prefixes)
    if not rows:
        raise NoTrajectoriesError(f"no verified trajectory among the records given for {base_path}")
    model, tokenizer = load_policy(base_path)
    out = Path(out_path)
    args = SFTConfig(
        output_dir=str(out / "sft-work"),
        max_steps=settings.steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        lr_scheduler_type=settings.lr_scheduler_type,
        warmup_steps=min(20, settings.steps // 10),
        max_length=settings.max_length,
        seed=settings.seed,
        use_cpu=settings.use_cpu,
        report_to="none",
        save_strategy="no",
        logging_steps=max(1, settings.steps // 10),
        disable_tqdm=True,
        dataloader_pin_memory=False,
        gradient_checkpointing=settings.gradient_checkpointing,
    )
    phrase_ids = phrase_token_ids(tokenizer, settings.weighted_phrases)
    tokenized = tokenized_rows(tokenizer, rows)
    cut = rows_cut(tokenized, settings.max_length)
    trainer = _trainer_class(
        settings.tool_name_weight, phrase_ids, settings.weighted_message_opening, settings.weighted_argument_ends
    )(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(tokenized),
        processing_class=tokenizer,
    )
    output = trainer.train()
    save_final_model(trainer.model, tokenizer, out)
    summary = {
        "trajectories": len(replayed),
        "examples": len(rows),
        # Rows longer than max_length: their later turns were not learnt.
        "cut": cut,
        "relabelled": settings.relabel,
        "tool_name_weight": settings.tool_name_weight,
        "weighted_phrases": list(settings.weighted_phrases),
        "weighted_message_opening": settings.weighted_message_opening,
        "weighted_argument_ends": settings.weighted_argument_ends,
        "steps": settings.steps,
        "train_loss": float(output.training_loss),
        "model_path": str(out),
    }
    if report is not None:
        report(summary)
    return summary
