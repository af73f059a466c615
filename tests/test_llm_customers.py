"""LLM-played customers chosen by `RETRAIN_CUSTOMER`, against a small OpenAI-compatible server on
127.0.0.1 that each test starts itself (no hosted model can be reached from here).

The server plays a plain customer from what the simulator sends it: it reads the brief in the
system message and answers the agent's last message. Its model name picks a failure to act out:
a slow answer, a 503 before a good answer, a body that is not a completion, an empty reply.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from dataplane.contract import validate_record
from domains.retail.customer import PersonaSimulator
from domains.retail.traffic.simulate import simulate
from evaluation.rollout import run_rollouts
from tests.helpers_chat_server import chat_server, completion
from tests.helpers_eval import expert_steps, make_records
from tests.helpers_retail import RetailEnvironment
from tests.helpers_traffic import NOW, generated_world, read_records
from training.customers import (
    PERSONA_PROMPTS,
    PERSONAS,
    CustomerConfigError,
    LLMSimulator,
    SimulatorBackendError,
    make_simulator,
)
from training.customers.config import API_KEY_SETTING, CUSTOMER_SETTING, CustomerSpec, parse_customer
from training.customers.llm import STOP_TOKEN, OpenAIChatBackend
from training.customers.prompts import persona_key, system_prompt
from training.policies import ScriptedPolicy, assistant_message, assistant_turns

SCENARIO = {
    "instruction": "You want to cancel order #W100 because it is no longer needed.",
    "known_info": {"email": "ann.lee@example.com", "order_ids": ["#W100"]},
    "persona": "adversarial",
}


def customer_line(messages: list[dict]) -> str:
    """What the stand-in customer says: its goal first, then the facts the agent asks for."""
    system = messages[0]["content"]
    known = json.loads(re.search(r"What you know: (.*)", system).group(1))
    want = re.search(r"What you want: (.*)", system).group(1)
    agent = messages[-1]["content"].lower()
    if len(messages) == 2:
        return f"Hello. {want}"
    if "email" in agent and known.get("email"):
        return f"My email is {known['email']}."
    if "name" in agent or "email" in agent:
        return f"My name is {known.get('first_name')} {known.get('last_name')} and my zip code is {known.get('zip')}."
    if re.search(r"shall i|confirm|proceed|would you like", agent):
        return "Yes, please go ahead."
    return f"Thank you, that is all. {STOP_TOKEN}"


def _answer(body: dict, count: int) -> tuple[int, object]:
    model = body["model"]
    if model == "slow":
        time.sleep(1.0)
    elif model == "flaky" and count == 1:
        return 503, {"error": "warming up"}
    elif model == "bad-request":
        return 400, {"error": "unknown model"}
    return 200, {
        "garbled": "not a completion",
        "no-choices": {"choices": []},
        "empty": completion("  "),
        "number": completion(42),
    }.get(model, completion(customer_line(body["messages"])))


@pytest.fixture()
def server():
    with chat_server(_answer) as httpd:
        yield httpd


@pytest.fixture()
def llm_customer(server, monkeypatch):
    """RETRAIN_CUSTOMER pointed at the stand-in server."""
    monkeypatch.setenv(CUSTOMER_SETTING, f"openai:customer@{server.base}/v1")
    monkeypatch.setenv(API_KEY_SETTING, "k-123")
    return server


def _dead_port() -> int:
    with socket.socket() as probe:  # nobody listens on it once closed
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- the setting --------------------------------------------------------------------------------


def test_the_setting_names_one_customer(monkeypatch):
    assert parse_customer(None) == parse_customer("") == parse_customer(" rules ") == CustomerSpec("rules")
    assert parse_customer("openai:qwen2.5:7b@http://10.0.0.5:8000/v1") == CustomerSpec(
        "openai", model="qwen2.5:7b", base_url="http://10.0.0.5:8000/v1"
    )
    assert parse_customer("transformers:/models/cust") == CustomerSpec("transformers", path="/models/cust")
    for bad, message in [
        ("gpt4", "unknown customer kind 'gpt4'"),
        ("openai:http://127.0.0.1:8000", "openai:<model>@"),
        ("openai:m@127.0.0.1:8000", "openai:<model>@"),
        ("transformers:", "transformers:<path>"),
    ]:
        with pytest.raises(CustomerConfigError, match=re.escape(message)):
            parse_customer(bad)
    monkeypatch.delenv(CUSTOMER_SETTING, raising=False)
    assert isinstance(make_simulator(SCENARIO), PersonaSimulator)  # the default stays rule-based


def test_a_bad_setting_is_an_error_not_the_rules(monkeypatch, tmp_path):
    monkeypatch.setenv(CUSTOMER_SETTING, "openai:no-at-sign")
    with pytest.raises(CustomerConfigError, match=CUSTOMER_SETTING):
        RetailEnvironment().reset(initial_state={"users": {}, "orders": {}, "products": {}}, user_scenario=SCENARIO)
    monkeypatch.setenv(CUSTOMER_SETTING, f"transformers:{tmp_path / 'missing'}")
    with pytest.raises(CustomerConfigError, match="is not a folder"):
        make_simulator(SCENARIO)


def test_persona_briefs_cover_the_playbook():
    assert set(PERSONA_PROMPTS) == {"cooperative", "impatient", "confused", "plays_dumb", "adversarial"}
    # Every persona the traffic simulator writes maps onto one of them.
    assert {p: persona_key(p) for p in PERSONAS} == {
        "polite": "cooperative",
        "angry": "impatient",
        "confused": "confused",
        "terse": "impatient",
        "plays_dumb": "plays_dumb",
    }
    assert persona_key("Plays dumb, forthcoming") == "plays_dumb" and persona_key("") == "cooperative"
    for persona, brief in PERSONA_PROMPTS.items():
        prompt = system_prompt({**SCENARIO, "persona": persona.replace("_", " ")})
        assert brief in prompt and SCENARIO["instruction"] in prompt and STOP_TOKEN in prompt


def test_a_local_chat_model_through_the_setting(monkeypatch, tmp_path):
    """`transformers:<path>`: a randomly initialised 2-layer Qwen2 with a tokenizer trained here."""
    import torch  # heavy: only this test builds a model
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = [system_prompt(SCENARIO), "hi how can i help you today my email is cancel order"] * 3
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=fast.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "cust")
    fast.save_pretrained(tmp_path / "cust")
    monkeypatch.setenv(CUSTOMER_SETTING, f"transformers:{tmp_path / 'cust'}")
    sim = make_simulator(SCENARIO, seed=1)
    assert isinstance(sim, LLMSimulator) and type(sim.backend).__name__ == "TransformersChatBackend"
    opening = sim.opening_message()
    assert isinstance(opening, str) and opening
    assert make_simulator(SCENARIO, seed=1).backend is sim.backend  # the model loads once a process


# --- a conversation, and each way the server can fail -------------------------------------------


def test_a_conversation_through_the_setting(llm_customer):
    sim = make_simulator(SCENARIO, seed=3)
    assert isinstance(sim, LLMSimulator)
    assert sim.opening_message() == f"Hello. {SCENARIO['instruction']}"
    assert sim.reply("Could you give me your email?") == "My email is ann.lee@example.com."
    assert sim.reply("Done: #W100 is cancelled.") == "Thank you, that is all." and sim.finished
    assert len(llm_customer.requests) == 3  # nothing after the customer left
    path, headers, body = llm_customer.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer k-123"
    assert PERSONA_PROMPTS["adversarial"] in body["messages"][0]["content"]
    # A second simulator for the same brief and seed opens with the same words, without asking again.
    assert make_simulator(SCENARIO, seed=3).opening_message() == f"Hello. {SCENARIO['instruction']}"
    assert len(llm_customer.requests) == 3


def test_a_timeout_is_retried_a_bounded_number_of_times(server):
    backend = OpenAIChatBackend(server.base, "slow", timeout=0.2, retries=1, backoff=0.0)
    started = time.monotonic()
    with pytest.raises(SimulatorBackendError, match=r"no reply after 2 attempt\(s\): timed out after 0.2s; timed out"):
        LLMSimulator(backend, SCENARIO).opening_message()
    assert time.monotonic() - started < 5
    assert len(server.requests) == 2


def test_a_passing_outage_is_retried_and_recovers(server):
    backend = OpenAIChatBackend(server.base, "flaky", backoff=0.01)
    assert LLMSimulator(backend, SCENARIO).opening_message().startswith("Hello.")
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("garbled", "malformed completion"),
        ("no-choices", "malformed completion"),
        ("number", "content is int, not text"),
        ("empty", "empty reply"),
        ("bad-request", "HTTP 400"),
    ],
)
def test_a_malformed_answer_is_a_clear_error_at_once(server, model, message):
    backend = OpenAIChatBackend(server.base, model, backoff=0.01)
    with pytest.raises(SimulatorBackendError, match=message):
        LLMSimulator(backend, SCENARIO).opening_message()
    assert len(server.requests) == 1  # asking again would get the same answer


def test_a_dead_server_fails_the_conversation(monkeypatch):
    port = _dead_port()
    monkeypatch.setenv(CUSTOMER_SETTING, f"openai:customer@http://127.0.0.1:{port}")
    env = RetailEnvironment()
    with pytest.raises(SimulatorBackendError, match=rf"127.0.0.1:{port}.*no reply after 3 attempt\(s\).*unreachable"):
        env.reset(initial_state={"users": {}, "orders": {}, "products": {}}, user_scenario=SCENARIO, seed=1)


# --- training, evaluation and traffic use it ----------------------------------------------------


def test_the_training_environment_talks_to_the_llm_customer(llm_customer):
    env = RetailEnvironment()
    env.reset(initial_state={"users": {}, "orders": {}, "products": {}}, user_scenario=SCENARIO, seed=5)
    assert isinstance(env.simulator, LLMSimulator)
    assert env.send_message_to_customer(message="What is your email?") == "My email is ann.lee@example.com."


def _listening_policy(records):
    """Asks the customer for their email, authenticates with whatever they answer, then plays gold."""
    plans = {
        r["interaction_id"]: [s for s in expert_steps(r) if not s["name"].startswith("find_user_id")] for r in records
    }

    def act(conversation):
        turn = assistant_turns(conversation)
        if turn == 0:
            return {"name": "send_message_to_customer", "arguments": {"message": "Could you give me your email?"}}
        if turn == 1:
            found = re.search(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", conversation[-1]["content"])
            if found is None:
                return assistant_message("I could not verify you.")
            return {"name": "find_user_id_by_email", "arguments": {"email": found.group(0).rstrip(".")}}
        plan = plans[conversation.task_id]
        return plan[turn - 2] if turn - 2 < len(plan) else assistant_message("Is there anything else?")

    return ScriptedPolicy(act, name="listening")


def test_an_evaluation_runs_end_to_end_with_the_llm_customer(llm_customer):
    records = [r for r in make_records(12) if "email" in r["user_scenario"]["known_info"]][:4]
    assert records
    trials = run_rollouts(_listening_policy(records), records, k=1, seed=0)
    assert all(t.success for t in trials), [(t.record_id, t.ended_by) for t in trials if not t.success]
    for trial, record in zip(trials, records):
        assert trial.messages[1]["content"] == f"Hello. {record['user_scenario']['instruction']}"
        assert trial.messages[3]["content"] == f"My email is {record['user_scenario']['known_info']['email']}."
    # One opening and one answer per conversation went to the server.
    assert len(llm_customer.requests) == 2 * len(records)


def test_the_traffic_simulator_writes_llm_customer_conversations(llm_customer, tmp_path):
    summary = simulate(days=1, per_day=4, seed=2, out_dir=tmp_path, world=generated_world())
    records = read_records(summary["files"])
    assert len(records) == 4 and llm_customer.requests
    for record in records:
        validate_record(record, now=NOW)
        opening = next(m["content"] for m in record["messages"] if m["role"] == "user")
        assert opening == f"Hello. {record['user_scenario']['instruction']}"
