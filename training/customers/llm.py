"""A customer simulator backed by a chat model: a local transformers model or an OpenAI-compatible
HTTP endpoint (vLLM, TGI, a hosted API), behind the same `CustomerSimulator` interface.

The model plays the customer, so roles are mirrored: the agent's messages are the model's "user"
turns and the customer's own lines are its "assistant" turns. The model ends the conversation by
writing STOP_TOKEN. Backend failures raise `SimulatorBackendError`; there is no fallback reply,
because a silent canned answer would quietly turn a broken simulator into training data.
"""

from __future__ import annotations

import re
import time
import weakref
from collections import OrderedDict
from typing import Any, Protocol

import requests

from training.customers.base import SimulatedCustomerState
from training.customers.prompts import STOP_TOKEN, system_prompt

__all__ = [
    "STOP_TOKEN",
    "ChatBackend",
    "LLMSimulator",
    "OpenAIChatBackend",
    "SimulatorBackendError",
    "TransformersChatBackend",
    "system_prompt",
]

AGENT_GREETING = "Hi! How can I help you today?"
_POSITIVE = re.compile(r"\b(?:thank|thanks|great|perfect|appreciate|wonderful)\b", re.I)
_NEGATIVE = re.compile(r"\b(?:ridiculous|frustrat\w*|angry|useless|terrible|unacceptable|annoy\w*)\b", re.I)


class SimulatorBackendError(RuntimeError):
    """The chat backend could not produce a reply (unreachable, bad status, malformed answer)."""

    def __init__(self, backend: str, detail: str) -> None:
        super().__init__(f"{backend}: {detail}")
        self.backend = backend
        self.detail = detail


class ChatBackend(Protocol):
    """Anything that turns a chat (list of {"role", "content"}) into the next assistant text."""

    def complete(self, messages: list[dict[str, str]], seed: int = 0) -> str: ...


# The environment (at reset) and the prompt builder (initial_messages) each ask a fresh simulator
# for the opening of the same (scenario, seed), and both must see the same words; a second model
# call would cost time and might differ. So an opening is remembered per backend, keyed by the
# brief and the seed, a bounded number of them.
_OPENINGS: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, int], str]] = weakref.WeakKeyDictionary()
MAX_REMEMBERED_OPENINGS = 4096
LEFT = "(The customer has left the conversation.)"


class LLMSimulator(SimulatedCustomerState):
    """A `CustomerSimulator` whose lines come from `backend.complete`.

    Mood is estimated from the customer's own words (thanks up, complaints down), a coarse proxy
    that keeps `sentiment_delta` meaningful without a second model call.
    """

    def __init__(self, backend: ChatBackend, user_scenario: dict[str, Any], seed: int = 0) -> None:
        self.backend = backend
        self.seed = seed
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt(user_scenario)}]
        self._mood = 0.0
        self._finished = False

    def _turn(self, agent_text: str, text: Any = None) -> str:
        self.messages.append({"role": "user", "content": agent_text})
        if text is None:
            text = self.backend.complete(list(self.messages), seed=self.seed + len(self.messages))
        if not isinstance(text, str):
            raise SimulatorBackendError(type(self.backend).__name__, f"returned {type(text).__name__}, not str")
        if not text.strip():
            raise SimulatorBackendError(type(self.backend).__name__, "returned an empty reply")
        self.messages.append({"role": "assistant", "content": text})
        if STOP_TOKEN in text:
            self._finished = True
            text = text.replace(STOP_TOKEN, "").strip()
        self._mood += 0.2 * len(_POSITIVE.findall(text)) - 0.2 * len(_NEGATIVE.findall(text))
        return text

    def opening_message(self) -> str:
        """The customer's first line, answering a standard agent greeting (the same for a brief and seed)."""
        memo = _OPENINGS.setdefault(self.backend, OrderedDict())
        key = (self.messages[0]["content"], self.seed)
        if key in memo:
            memo.move_to_end(key)
            return self._turn(AGENT_GREETING, memo[key])
        line = self._turn(AGENT_GREETING)
        memo[key] = self.messages[-1]["content"]
        if len(memo) > MAX_REMEMBERED_OPENINGS:
            memo.popitem(last=False)
        return line

    def reply(self, agent_message: str) -> str:
        """The customer's answer to `agent_message`; after the customer left, a fixed notice."""
        if self._finished:
            return LEFT
        return self._turn(str(agent_message))


def _fallback_prompt(messages: list[dict[str, str]]) -> str:
    # For tokenizers without a chat template (e.g. a tokenizer trained from scratch in a test).
    lines = [f"<|{m['role']}|>\n{m['content']}" for m in messages]
    return "\n".join(lines) + "\n<|assistant|>\n"


class TransformersChatBackend:
    """A local causal LM; greedy by default, so replies are deterministic without any seed.

    `model_path_or_model` is a folder for `from_pretrained` or an already loaded model; pass the
    tokenizer explicitly for locally trained tokenizers (AutoTokenizer can silently swap a local
    tokenizer for another class). With `temperature > 0` sampling is seeded per call in a forked RNG, so the
    caller's global torch RNG is untouched.
    """

    def __init__(
        self, model_path_or_model: Any, tokenizer: Any = None, max_new_tokens: int = 64, temperature: float = 0.0
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: loaded only for a local model

        if isinstance(model_path_or_model, (str, bytes)) or hasattr(model_path_or_model, "__fspath__"):
            self.model = AutoModelForCausalLM.from_pretrained(model_path_or_model)
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path_or_model)
        else:
            if tokenizer is None:
                raise ValueError("TransformersChatBackend: a loaded model needs its tokenizer passed explicitly")
            self.model, self.tokenizer = model_path_or_model, tokenizer
        self.model.eval()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature

    def complete(self, messages: list[dict[str, str]], seed: int = 0) -> str:
        import torch  # heavy: loaded only when a local model generates

        if getattr(self.tokenizer, "chat_template", None):
            prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            prompt = _fallback_prompt(messages)
        inputs = self.tokenizer(prompt, return_tensors="pt")
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        sampling = (
            {"do_sample": True, "temperature": self.temperature} if self.temperature > 0 else {"do_sample": False}
        )
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            output = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, pad_token_id=pad_id, **sampling)
        new_tokens = output[0, inputs["input_ids"].shape[1] :]
        return self.tokenizer.decode(new_tokens, skip_special_tokens=True).strip()


DEFAULT_TIMEOUT_S = 30.0
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF_S = 0.5
# Worth asking again: rate limited, or the server (or a proxy in front of it) failed for now.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class OpenAIChatBackend:
    """An OpenAI-compatible `/v1/chat/completions` endpoint, called with `requests`.

    `base_url` may include the `/v1` suffix or not. A timeout, a refused connection or a status in
    RETRY_STATUSES is retried `retries` times with doubling pauses from `backoff`; after the last
    attempt `SimulatorBackendError` names the URL and every attempt's failure. Any other status and
    an answer without text in `choices[0].message.content` raise at once: asking again would get
    the same answer.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        temperature: float = 0.0,
        max_tokens: int = 256,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF_S,
    ) -> None:
        if retries < 0 or timeout <= 0 or backoff < 0:
            raise ValueError(f"OpenAIChatBackend: retries={retries}, timeout={timeout}, backoff={backoff} out of range")
        root = base_url.rstrip("/")
        self.url = root + ("/chat/completions" if root.endswith("/v1") else "/v1/chat/completions")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        self.backoff = backoff

    @property
    def name(self) -> str:
        return f"OpenAIChatBackend({self.url}, model {self.model!r})"

    def complete(self, messages: list[dict[str, str]], seed: int = 0) -> str:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": seed,
        }
        failures: list[str] = []
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = requests.post(self.url, json=payload, headers=headers, timeout=self.timeout)
            except requests.Timeout:
                failures.append(f"timed out after {self.timeout:g}s")
                continue
            except requests.RequestException as exc:
                failures.append(f"endpoint unreachable: {type(exc).__name__}: {exc}")
                continue
            if response.status_code in RETRY_STATUSES:
                failures.append(f"HTTP {response.status_code}: {response.text[:300]!r}")
                continue
            if response.status_code != 200:
                raise SimulatorBackendError(self.name, f"HTTP {response.status_code}: {response.text[:300]!r}")
            return self._content(response)
        raise SimulatorBackendError(self.name, f"no reply after {len(failures)} attempt(s): " + "; ".join(failures))

    def _content(self, response: requests.Response) -> str:
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise SimulatorBackendError(self.name, f"malformed completion {response.text[:300]!r}") from exc
        if not isinstance(content, str):
            raise SimulatorBackendError(self.name, f"message content is {type(content).__name__}, not text")
        return content
