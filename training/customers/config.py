"""Which customer plays the simulated conversations: the one setting, `RETRAIN_CUSTOMER`.

- unset, empty or `rules`: the rule-based `PersonaSimulator` (the default);
- `openai:<model>@<base_url>`: an LLM-played customer from any OpenAI-compatible endpoint (vLLM,
  TGI, Ollama, a hosted API), e.g. `openai:Qwen2.5-7B-Instruct@http://10.0.0.5:8000/v1`; a bearer
  key, if the endpoint wants one, comes from `RETRAIN_CUSTOMER_API_KEY` (a secret stays out of the
  setting, which is logged);
- `transformers:<path>`: an LLM-played customer from a local chat model folder.

Training environments, evaluation rollouts and the traffic simulator all build their customer
through `training.customers.make_simulator`, which asks `configured_backend` here; so the setting
reaches all three, including the out-of-process trainer, which inherits the environment. A bad
setting raises `CustomerConfigError` naming it: a typo must not quietly fall back to the rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from training.checkpoints import load_policy
from training.customers.llm import ChatBackend, OpenAIChatBackend, TransformersChatBackend

CUSTOMER_SETTING = "RETRAIN_CUSTOMER"
API_KEY_SETTING = "RETRAIN_CUSTOMER_API_KEY"
KINDS = ("rules", "openai", "transformers")
_FORMS = "rules, openai:<model>@<base_url> or transformers:<path>"


class CustomerConfigError(ValueError):
    """A `RETRAIN_CUSTOMER` value that names no usable customer."""


@dataclass(frozen=True)
class CustomerSpec:
    """A parsed setting: `kind` is one of KINDS; `model`/`base_url` (openai) or `path` (transformers)."""

    kind: str
    model: str | None = None
    base_url: str | None = None
    path: str | None = None


def parse_customer(text: str | None) -> CustomerSpec:
    """The customer a setting names; raises CustomerConfigError for anything else.

    >>> parse_customer("openai:cust-sim@http://127.0.0.1:8000/v1")
    CustomerSpec(kind='openai', model='cust-sim', base_url='http://127.0.0.1:8000/v1', path=None)
    """
    value = (text or "").strip()
    if value in ("", "rules"):
        return CustomerSpec("rules")
    kind, _, rest = value.partition(":")
    if kind == "openai":
        # The model comes first: URLs hold colons (scheme, port), model names rarely an "@".
        model, at, base_url = rest.partition("@")
        if not at or not model.strip() or not base_url.startswith(("http://", "https://")):
            raise CustomerConfigError(
                f"{CUSTOMER_SETTING}={value!r}: an OpenAI-compatible customer is openai:<model>@<http(s) base_url>"
            )
        return CustomerSpec("openai", model=model.strip(), base_url=base_url)
    if kind == "transformers":
        if not rest.strip():
            raise CustomerConfigError(f"{CUSTOMER_SETTING}={value!r}: a local customer is transformers:<path>")
        return CustomerSpec("transformers", path=rest.strip())
    raise CustomerConfigError(f"{CUSTOMER_SETTING}={value!r}: unknown customer kind {kind!r}; expected {_FORMS}")


def build_backend(spec: CustomerSpec, api_key: str | None = None) -> ChatBackend | None:
    """The chat backend a spec names, None for the rule-based customer."""
    if spec.kind == "openai":
        return OpenAIChatBackend(str(spec.base_url), str(spec.model), api_key=api_key or None)
    if spec.kind == "transformers":
        folder = Path(str(spec.path)).expanduser()
        if not folder.is_dir():
            raise CustomerConfigError(f"{CUSTOMER_SETTING}: local customer model {folder} is not a folder")
        model, tokenizer = load_policy(folder)
        return TransformersChatBackend(model, tokenizer=tokenizer)
    return None


@lru_cache(maxsize=4)
def _backend(setting: str, api_key: str | None) -> ChatBackend | None:
    # One backend per setting and process: a local model loads once, and its remembered openings
    # are shared by every simulator of the process.
    return build_backend(parse_customer(setting), api_key)


def configured_backend() -> ChatBackend | None:
    """The backend `RETRAIN_CUSTOMER` names (None: the rule-based customer), read at each call."""
    return _backend(os.environ.get(CUSTOMER_SETTING, ""), os.environ.get(API_KEY_SETTING))
