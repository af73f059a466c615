"""The customer simulators: persona rules, determinism, and the two chat-model backends."""

from __future__ import annotations

import json
import socket

import pytest

from domains.retail.customer import PersonaSimulator, scenario_facts
from tests.helpers_chat_server import chat_server, completion
from training.customers import ENDED, PERSONAS, CustomerSimulator, make_simulator
from training.customers.llm import (
    STOP_TOKEN,
    LLMSimulator,
    OpenAIChatBackend,
    SimulatorBackendError,
    TransformersChatBackend,
)

SOFIA = (
    "Your name is Sofia Kovacs and your zip code is 19049. You are polite. For #W7736983, exchange "
    "Coffee Maker {'color': 'black'} to {'color': 'red'}; via paypal_123. "
)
KNOWN = {
    "email": "ann.lee@example.com",
    "first_name": "Ann",
    "last_name": "Lee",
    "zip": "10001",
    "order_ids": ["#W100"],
    "intent": "cancel_order",
    "reason": "no longer needed",
    "item_names": ["Desk Lamp"],
    "payment_method_id": "gift_card_7",
    "address": {"address1": "1 Main St", "city": "Austin", "zip": "73301"},
}


def scenario(persona: str = "polite", known: dict | None = None, instruction: str = "") -> dict:
    return {"instruction": instruction, "known_info": dict(KNOWN if known is None else known), "persona": persona}


# --- facts -------------------------------------------------------------------------------------


def test_facts_come_from_a_reference_instruction_when_known_info_is_empty():
    facts = scenario_facts({"instruction": SOFIA, "known_info": {}, "persona": ""})
    assert (facts.first_name, facts.last_name, facts.zip, facts.email) == ("Sofia", "Kovacs", "19049", None)
    assert [(g.intent, g.order_id, g.items) for g in facts.goals] == [("exchange_items", "#W7736983", ["Coffee Maker"])]
    assert facts.payment_method_id == "paypal_123"


def test_every_reference_instruction_yields_one_goal_per_gold_write(reference_tasks):
    for task in reference_tasks:
        facts = scenario_facts({"instruction": task["instruction"], "known_info": {}, "persona": ""})
        gold_orders = [a["arguments"]["order_id"] for a in task["actions"]]
        assert [g.order_id for g in facts.goals] == gold_orders, task["task_id"]
        assert facts.zip or facts.email, task["task_id"]


def test_known_info_wins_over_the_instruction():
    facts = scenario_facts(
        scenario(known={"zip": "99999", "intent": "cancel_order", "order_ids": ["#W5"]}, instruction=SOFIA)
    )
    assert facts.zip == "99999" and facts.first_name == "Sofia"
    assert [(g.intent, g.order_id) for g in facts.goals] == [("cancel_order", "#W5")]


# --- persona behaviour ---------------------------------------------------------------------------


@pytest.mark.parametrize("persona", PERSONAS)
def test_opening_states_the_reason_without_identity(persona):
    sim = PersonaSimulator(scenario(persona))
    text = sim.opening_message()
    assert "#W100" in text and "cancel" in text.lower()
    assert "ann.lee@example.com" not in text and "10001" not in text
    assert isinstance(sim, CustomerSimulator)


def test_forthcoming_persona_volunteers_identity():
    text = PersonaSimulator(scenario("polite forthcoming")).opening_message()
    assert "Ann Lee" in text and "10001" in text


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Could you provide your email address?", "ann.lee@example.com"),
        ("What is your name and zip code?", "Ann Lee and my zip code is 10001"),
        ("Which order is this about?", "#W100"),
        ("What is the reason for the cancellation?", "no longer needed"),
        ("Which payment method should the refund go to?", "gift_card_7"),
        ("What is the new address?", "1 Main St, Austin, 73301"),
        ("Which item do you mean?", "Desk Lamp"),
    ],
)
def test_facts_are_revealed_when_asked(question, expected):
    assert expected in PersonaSimulator(scenario()).reply(question)


def test_unknown_email_falls_back_to_name_and_zip():
    sim = PersonaSimulator({"instruction": SOFIA, "known_info": {}, "persona": "terse"})
    answer = sim.reply("Please provide your email.")
    assert "don't remember" in answer and "Sofia Kovacs" in answer and "19049" in answer


def test_plays_dumb_refuses_the_email_once_then_gives_it():
    sim = PersonaSimulator(scenario("plays_dumb"))
    first = sim.reply("Can you share your email?")
    assert "ann.lee@example.com" not in first
    assert "ann.lee@example.com" in sim.reply("I need your email to verify you. What is it?")
    assert sim.sentiment_delta == 0.0


def test_repeated_questions_lower_the_mood_and_angry_customers_more():
    polite, angry = PersonaSimulator(scenario("polite")), PersonaSimulator(scenario("angry"))
    for sim in (polite, angry):
        sim.reply("What is your email?")
        assert sim.sentiment_delta == 0.0
        sim.reply("What is your email?")
    assert polite.sentiment_delta < 0 and angry.sentiment_delta < polite.sentiment_delta


def test_confirms_a_matching_proposal_and_refuses_others():
    sim = PersonaSimulator(scenario())
    assert sim.reply("I will cancel order #W100 (reason: no longer needed). Shall I proceed?").startswith("Yes")
    assert sim.sentiment_delta == 0.0
    wrong_order = sim.reply("Do you want me to cancel order #W999?")
    wrong_action = sim.reply("Should I change the shipping address of order #W100?")
    assert wrong_order.startswith("No") and wrong_action.startswith("No")
    assert sim.sentiment_delta < 0


@pytest.mark.parametrize(
    ("instruction", "wrong", "right", "correction"),
    [
        (  # items: the proposal must name every item the customer wants returned
            "Your name is Ann Lee and your zip code is 10001. Return #W2 via paypal_1: Desk Lamp; Mug; ",
            "I can return the Desk Lamp and the Kettle from order #W2, refunded to paypal_1. Shall I proceed?",
            "I can return the Desk Lamp and the Mug from order #W2, refunded to paypal_1. Shall I proceed?",
            "I meant the Mug.",
        ),
        (  # the payment method it named, not another of its account's
            "Your name is Ann Lee and your zip code is 10001. Return #W2 via paypal_1: Desk Lamp; ",
            "I can return the Desk Lamp from order #W2, refunded to credit_card_9. Shall I proceed?",
            "I can return the Desk Lamp from order #W2, refunded to paypal_1. Shall I proceed?",
            "Please use paypal_1.",
        ),
        (  # an exchange's items, read from the instruction's variants
            SOFIA,
            "I can exchange the Desk Lamp from order #W7736983 for the new variant, settling any price "
            "difference with paypal_123. Shall I proceed?",
            "I can exchange the Coffee Maker from order #W7736983 for the new variant, settling any price "
            "difference with paypal_123. Shall I proceed?",
            "I meant the Coffee Maker.",
        ),
        (  # a cancellation's reason
            "Your name is Ann Lee and your zip code is 10001. Cancel order #W1 because ordered by mistake. ",
            "I can cancel order #W1 (reason: no longer needed). Shall I proceed?",
            "I can cancel order #W1 (reason: ordered by mistake). Shall I proceed?",
            "The reason is: ordered by mistake.",
        ),
        (  # an order's new address, every part of it
            "Your name is Ann Lee and your zip code is 10001. For #W5, change address to "
            "{'address1': '9 Oak Ave', 'address2': 'Suite 2', 'city': 'Reno', 'state': 'NV', 'zip': '89501', "
            "'country': 'USA'}. ",
            "I can update the shipping address of order #W5 to 9 Oak Ave, Suite 2, Reno, NV, 89510, USA. "
            "Shall I proceed?",
            "I can update the shipping address of order #W5 to 9 Oak Ave, Suite 2, Reno, NV, 89501, USA. "
            "Shall I proceed?",
            "The address is 9 Oak Ave, Suite 2, Reno, NV, 89501, USA.",
        ),
    ],
    ids=["items", "payment", "exchange", "reason", "address"],
)
def test_refuses_a_proposal_naming_what_it_did_not_ask_for_and_says_what_it_wants(
    instruction, wrong, right, correction
):
    sim = PersonaSimulator({"instruction": instruction, "known_info": {}, "persona": "polite"})
    refused = sim.reply(wrong)
    assert refused.startswith("No") and refused.endswith(correction), refused
    assert sim.sentiment_delta < 0
    assert sim.reply(right).startswith("Yes")


def test_confirms_what_it_cannot_check():
    # No payment method named by the customer, and a cancellation that names no items: the
    # customer knows nothing to object to.
    sim = PersonaSimulator(scenario(known={**KNOWN, "payment_method_id": None}))
    assert sim.reply("I can cancel order #W100 (reason: no longer needed). Shall I proceed?").startswith("Yes")
    sim = PersonaSimulator(
        {
            "instruction": "Your zip code is 10001. For #W3, change payment to gift_card_4. ",
            "known_info": {},
            "persona": "",
        }
    )
    assert sim.reply("I can switch the payment method of order #W3 to gift_card_4. Shall I proceed?").startswith("Yes")
    assert sim.reply("I can switch the payment method of order #W3 to paypal_4. Shall I proceed?").startswith("No")


def test_success_then_goodbye_finishes_with_positive_mood():
    sim = PersonaSimulator(scenario())
    sim.opening_message()
    reply = sim.reply("Your order #W100 has been cancelled. Is there anything else?")
    assert sim.finished and sim.sentiment_delta > 0
    assert "bye" in reply.lower()
    assert sim.reply("Hello?") == ENDED


def test_multi_goal_customer_moves_on_to_the_next_goal():
    instruction = (
        "Your name is Ann Lee and your zip code is 10001. Cancel order #W1 because ordered by mistake. "
        "Return #W2 via paypal_1: Desk Lamp; "
    )
    sim = PersonaSimulator({"instruction": instruction, "known_info": {}, "persona": "polite"})
    reply = sim.reply("Order #W1 has been cancelled.")
    assert "return the Desk Lamp from order #W2" in reply and not sim.finished
    sim.reply("The return for #W2 has been requested successfully.")
    assert sim.finished


def test_unwanted_transfer_ends_and_hurts_mood():
    sim = PersonaSimulator(scenario())
    sim.reply("I will transfer you to a human agent.")
    assert sim.finished and sim.sentiment_delta < 0


def test_errors_lower_the_mood():
    sim = PersonaSimulator(scenario())
    sim.reply("Sorry, I was unable to do that.")
    assert sim.sentiment_delta < 0 and not sim.finished


def _transcript(seed: int, persona: str) -> list[str]:
    sim = PersonaSimulator({"instruction": SOFIA, "known_info": {}, "persona": persona}, seed=seed)
    lines = [sim.opening_message()]
    for _ in range(4):
        lines += [sim.reply("How can I help?"), sim.reply("What is your name and zip code?")]
    return lines


@pytest.mark.parametrize("persona", PERSONAS)
def test_deterministic_for_a_seed(persona):
    assert _transcript(3, persona) == _transcript(3, persona)


def test_seeds_vary_phrasing_not_facts():
    transcripts = {tuple(_transcript(seed, "polite")) for seed in range(8)}
    assert len(transcripts) > 1
    assert all("19049" in t[2] for t in transcripts)


def test_make_simulator_picks_the_backend():
    assert isinstance(make_simulator(scenario()), PersonaSimulator)
    assert isinstance(make_simulator(scenario(), backend=_RecordingBackend(["hi"])), LLMSimulator)


# --- LLM simulator -------------------------------------------------------------------------------


class _RecordingBackend:
    """A ChatBackend double that records what it was sent and answers from a script."""

    def __init__(self, lines: list[str]) -> None:
        self.lines, self.calls = list(lines), []

    def complete(self, messages, seed=0):
        self.calls.append((list(messages), seed))
        return self.lines.pop(0)


def test_llm_simulator_mirrors_roles_and_stops_on_token():
    backend = _RecordingBackend(["I want to cancel #W100.", f"Thanks, that is all. {STOP_TOKEN}"])
    sim = LLMSimulator(backend, scenario("angry"), seed=5)
    assert sim.opening_message() == "I want to cancel #W100."
    assert sim.reply("Done: order #W100 has been cancelled.") == "Thanks, that is all."
    sent, _ = backend.calls[1]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "angry" in sent[0]["content"] and "ann.lee@example.com" in sent[0]["content"]
    assert sent[3]["content"] == "Done: order #W100 has been cancelled."
    assert sim.finished and sim.sentiment_delta > 0
    assert len(backend.calls) == 2 and "left the conversation" in sim.reply("anything else?")


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    """A randomly initialised 2-layer Qwen2 with a word-level tokenizer trained here (no downloads)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    corpus = [system_line for system_line in (json.dumps(KNOWN), SOFIA, "hi how can i help you today cancel order")]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus * 3, trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]", "[EOS]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=fast.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny-chat")
    Qwen2ForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def test_transformers_backend_drives_the_simulator_deterministically(tiny_chat_model):
    from transformers import PreTrainedTokenizerFast

    def run() -> list[str]:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_chat_model)
        backend = TransformersChatBackend(str(tiny_chat_model), tokenizer=tokenizer, max_new_tokens=8)
        sim = make_simulator(scenario(), seed=1, backend=backend)
        return [sim.opening_message(), sim.reply("What is your email?")]

    first = run()
    assert all(isinstance(line, str) and line for line in first)
    assert run() == first


def test_transformers_backend_needs_a_tokenizer_with_a_loaded_model(tiny_chat_model):
    from transformers import AutoModelForCausalLM

    with pytest.raises(ValueError, match="tokenizer"):
        TransformersChatBackend(AutoModelForCausalLM.from_pretrained(tiny_chat_model))


def _echo(body: dict, count: int) -> tuple[int, object]:
    if body["model"] == "broken":
        return 500, {"error": "boom"}
    if body["model"] == "garbled":
        return 200, "garbled"
    return 200, completion(f"echo: {body['messages'][-1]['content']}")


@pytest.fixture()
def stub_server():
    with chat_server(_echo) as server:
        yield server


def test_openai_backend_posts_chat_completions(stub_server):
    base = f"http://127.0.0.1:{stub_server.server_port}"
    sim = make_simulator(scenario(), seed=2, backend=OpenAIChatBackend(base, "cust-sim", api_key="k1"))
    assert sim.opening_message() == "echo: Hi! How can I help you today?"
    assert sim.reply("What is your email?") == "echo: What is your email?"
    path, headers, body = stub_server.requests[-1]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer k1"
    assert body["model"] == "cust-sim" and body["messages"][0]["role"] == "system"
    assert [m["role"] for m in body["messages"][1:]] == ["user", "assistant", "user"]


def test_openai_backend_accepts_a_v1_base_url(stub_server):
    backend = OpenAIChatBackend(f"http://127.0.0.1:{stub_server.server_port}/v1/", "m")
    assert backend.complete([{"role": "user", "content": "x"}]) == "echo: x"
    assert stub_server.requests[-1][0] == "/v1/chat/completions"


@pytest.mark.parametrize(("model", "message"), [("broken", "HTTP 500"), ("garbled", "malformed completion")])
def test_openai_backend_rejects_bad_answers(stub_server, model, message):
    backend = OpenAIChatBackend(f"http://127.0.0.1:{stub_server.server_port}", model)
    with pytest.raises(SimulatorBackendError, match=message):
        LLMSimulator(backend, scenario()).opening_message()


def test_openai_backend_unreachable_endpoint_is_a_clear_error():
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    backend = OpenAIChatBackend(f"http://127.0.0.1:{port}", "m", timeout=2)
    with pytest.raises(SimulatorBackendError, match=f"127.0.0.1:{port}.*unreachable"):
        backend.complete([{"role": "user", "content": "hello"}])
