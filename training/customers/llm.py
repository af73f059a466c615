"""A customer simulator backed by a chat model: a local transformers model or an OpenAI-compatible
HTTP endpoint (vLLM, TGI, a hosted API), behind the same `CustomerSimulator` interface.

The model plays the customer, so roles are mirrored: the agent's messages are the model's "user"
turns and the customer's own lines are its "assistant" turns. The model ends the conversation by
writing STOP_TOKEN. Backend failures raise `SimulatorBackendError`; there is no fallback reply,
because a silent canned answer would quietly turn a broken simulator into training data.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

import requests

from training.customers.base import SimulatedCustomerState

STOP_TOKEN = "###STOP###"
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


def system_prompt(user_scenario: dict[str, Any]) -> str:
    """The customer's brief: persona, instruction and known facts, and how to end the chat."""
    known = json.dumps(user_scenario.get("known_info") or {}, sort_keys=True)
    return (
        "You are a customer talking to a retail customer-service agent. Stay in character and "
        f"write only what the customer says.\nPersona: {user_scenario.get('persona') or 'polite'}\n"
        f"What you want: {user_scenario.get('instruction') or ''}\nWhat you know: {known}\n"
        "Reveal a fact only when the agent asks for it. Agree only to actions that match what you "
        f"want. When your request is done or cannot be done, reply with {STOP_TOKEN}."
    )


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

    def _turn(self, agent_text: str) -> str:
        self.messages.append({"role": "user", "content": agent_text})
        text = self.backend.complete(list(self.messages), seed=self.seed + len(self.messages))
        if not isinstance(text, str):
            raise SimulatorBackendError(type(self.backend).__name__, f"returned {type(text).__name__}, not str")
        self.messages.append({"role": "assistant", "content": text})
        if STOP_TOKEN in text:
            self._finished = True
            text = text.replace(STOP_TOKEN, "").strip()
        self._mood += 0.2 * len(_POSITIVE.findall(text)) - 0.2 * len(_NEGATIVE.findall(text))
        return text

    def opening_message(self) -> str:
        """The customer's first line, answering a standard agent greeting."""
        return self._turn(AGENT_GREETING)

    def reply(self, agent_message: str) -> str:
        """The customer's answer to `agent_message`; after the customer left, a fixed notice."""
        if self._finished:
            return "(The customer has left the conversation.)"
        return self._turn(str(agent_message))


def _fallback_prompt(messages: list[dict[str, str]]) -> str:
    # For tokenizers without a chat template (e.g. a tokenizer trained from scratch in a test).
    lines = [f"<|{m['role']}|>\n{m['content']}" for m in messages]
    return "\n".join(lines) + "\n<|assistant|>\n"


class TransformersChatBackend:
    """A local causal LM; greedy by default, so replies are deterministic without any seed.

    `model_path_or_model` is a folder for `from_pretrained` or an already loaded model; pass the
    tokenizer explicitly for locally trained tokenizers (AutoTokenizer may substitute another class,
    AutoTokenizer can silently swap a local tokenizer for the stock one). With `temperature > 0` sampling is seeded per call in a forked RNG, so the
    caller's global torch RNG is untouched.
    """

    def __init__(
        self, model_path_or_model: Any, tokenizer: Any = None, max_new_tokens: int = 64, temperature: float = 0.0
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

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
        import torch

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


class OpenAIChatBackend:
    """An OpenAI-compatible `/v1/chat/completions` endpoint, called with `requests`.

    `base_url` may include the `/v1` suffix or not. Network failures, non-200 answers and answers
    without `choices[0].message.content` raise `SimulatorBackendError` naming the URL.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        temperature: float = 0.0,
        max_tokens: int = 256,
    ) -> None:
        root = base_url.rstrip("/")
        self.url = root + ("/chat/completions" if root.endswith("/v1") else "/v1/chat/completions")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.temperature = temperature
        self.max_tokens = max_tokens

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
        name = f"OpenAIChatBackend({self.url})"
        try:
            response = requests.post(self.url, json=payload, headers=headers, timeout=self.timeout)
        except requests.RequestException as exc:
            raise SimulatorBackendError(name, f"endpoint unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise SimulatorBackendError(name, f"HTTP {response.status_code}: {response.text[:300]!r}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise SimulatorBackendError(name, f"malformed completion {response.text[:300]!r}") from exc
        if not isinstance(content, str):
            raise SimulatorBackendError(name, f"message content is {type(content).__name__}, not text")
        return content
