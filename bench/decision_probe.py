"""Where a whole-shop agent's choice of tool follows the customer's request, and where it does not.

Served greedily, an agent takes a tool when every token of its call up to the tool's name is the
most likely one. This bench asks that question without sampling: it takes the scripted expert's
whole-shop conversations (the form the recipe's shop stage imitates: the expert serves order
status and cancellations itself and hands every other request to a person; `--conversations` of
the served day, seed 11, 1,500 customers, as `bench/shop_stage.py` serves them), reads each through
the PII gateway as the served agent reads it, and at each of the expert's tool calls measures,
teacher-forced, for each `--model`:

- the probability the model gives the expert's call, from `<tool_call>` through the tool's name
  and, for a message to the customer, through the message's first word
  (`training.sft.tool_name_positions` with `message_opening`: after a read both intents' next
  call is a message, a cancellation proposed or the status told), and
- whether greedy decoding would make it (every one of those tokens the model's most likely).

With `--arguments` it measures instead each string argument of the expert's calls: whether greedy
decoding, teacher-forced, writes the value's every token (an order id, an e-mail, a reason), and
how far back in the conversation the model last saw the value (tokens from its nearest earlier
occurrence to the call; none when the value appears nowhere before, as a reason the customer gave
in other words). A copy that fails only from far back is a reach the model lacks, one that fails
near too is not. It measures too the token where each argument of a call ends (the call goes on to
the next argument or closes: a cancellation that closes after the order id leaves out its reason).
`--fault-rate` has the expert's calls refused at that rate and retried (as the recipe's shop stage
simulates them), and measures the calls made again apart (`<tool> (retry)`).

Calls are grouped by the customer's intent and the call's place in the conversation (the tool the
expert called before it, then the tool): for order status and cancellations, the calls after
identification and after reading the order are where the two intents part.

    .venv/bin/python bench/decision_probe.py --model DIR [--model DIR ...] [--conversations 200] [--work DIR]
        [--arguments] [--fault-rate 0.08]

One line per model and group: `model=<name> intent=<i> place=<before>-><tool> calls=<n>
greedy=<share> p=<mean probability>`; with `--arguments`, `model=<name> argument=<tool>.<name>
distance=<bucket> values=<n> greedy=<share>` (an argument's end: `argument=<tool>.end<k> distance=-`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # appended: bench/ must not shadow the product's packages
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from shop_stage import SERVED_CUSTOMERS, SERVED_SEED, day_records  # noqa: E402  (the served day)

from domains.retail.level1 import LEVEL1_INTENTS  # noqa: E402
from domains.retail.tiny_agent import AgentRecipe  # noqa: E402
from domains.retail.traffic.agents import EXPERT_RATES, ScriptedAgent  # noqa: E402
from domains.retail.traffic.simulate import simulate  # noqa: E402
from training.checkpoints import load_policy  # noqa: E402
from training.curriculum import tools_for_levels  # noqa: E402
from training.sandbox.core import INJECTED_ERROR  # noqa: E402
from training.sandbox.episode import MESSAGE_TOOL  # noqa: E402
from training.sandbox.pii_gateway import PseudonymisedPolicy  # noqa: E402
from training.sandbox.prompting import tool_schemas  # noqa: E402
from training.sft import argument_end_positions, tool_name_positions  # noqa: E402


def expert_day(conversations: int, out: Path, fault_rate: float = 0.0) -> list[dict]:
    """The served day held by the shop stage's expert (the level-1 intents served, the rest handed
    over), its back-end calls refused at `fault_rate` and each refusal retried."""
    summary = simulate(
        days=1,
        per_day=conversations,
        seed=SERVED_SEED,
        out_dir=out,
        n_users=SERVED_CUSTOMERS,
        agent=ScriptedAgent(EXPERT_RATES, handles=LEVEL1_INTENTS, asks_details=True, tool_fault_rate=fault_rate),
    )
    return day_records(summary)


def decisions(record: dict) -> list[tuple[int, str]]:
    """(index of the assistant message, its place `<tool before>-><tool>`) for each expert tool call."""
    out, before = [], "start"
    for index, message in enumerate(record["messages"]):
        calls = message.get("tool_calls") or []
        if message.get("role") == "assistant" and calls:
            out.append((index, f"{before}->{calls[0]['name']}"))
            before = calls[0]["name"]
    return out


DISTANCES = (50, 100, 200, 400)  # bucket bounds, in tokens, for `--arguments`


def _calls_in_context(
    record: dict, tokenizer, schemas: list, skipped: Counter
) -> Iterator[tuple[str, list, str, Any, int]]:
    """For each expert tool call, in the served view: (place, the view's messages through it, the
    chat text through it, its tokenization with character offsets, tokens of the prompt before it);
    calls whose prompt and call do not tokenize apart are left out and counted in `skipped["calls"]`."""
    gateway = PseudonymisedPolicy(None, "retail")  # only its view of a conversation is used
    for index, place in decisions(record):
        seen = gateway.view_of(record["messages"][: index + 1])
        prefix = tokenizer.apply_chat_template(seen[:-1], tools=schemas, add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(seen, tools=schemas, tokenize=False)
        head = tokenizer(prefix, add_special_tokens=False)["input_ids"]
        encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
        if not full.startswith(prefix) or encoded["input_ids"][: len(head)] != head:
            skipped["calls"] += 1
            continue
        yield place, seen, full, encoded, len(head)


def probe(model_dir: Path, records: list[dict], tools: tuple[str, ...]) -> dict[tuple[str, str], list[tuple]]:
    """Per (intent, place): (greedy would make the call, probability of its name tokens) per call."""
    import torch

    model, tokenizer = load_policy(model_dir)
    model.eval()
    schemas = list(tool_schemas(tools, "retail"))
    table: dict[tuple[str, str], list[tuple]] = defaultdict(list)
    skipped: Counter = Counter()
    for record in records:
        for place, _, _, encoded, head in _calls_in_context(record, tokenizer, schemas, skipped):
            ids = encoded["input_ids"]
            tensor = torch.tensor([ids])
            marked = tool_name_positions(tensor, tokenizer, message_opening=True)[0].tolist()
            positions = [p for p in range(head, len(ids)) if marked[p]]
            if not positions:
                skipped["calls"] += 1
                continue
            with torch.no_grad():
                logits = model(tensor[:, : positions[-1]]).logits[0]
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            chosen = [log_probs[p - 1, ids[p]].item() for p in positions]
            greedy = all(int(log_probs[p - 1].argmax()) == ids[p] for p in positions)
            table[(record["intent"], place)].append((greedy, float(torch.tensor(chosen).sum().exp())))
    if skipped:
        print(
            f"{model_dir}: {skipped['calls']} calls skipped (the prompt and the call did not tokenize apart)",
            flush=True,
        )
    return table


def _bucket(distance: int | None) -> str:
    if distance is None:
        return "unseen"
    for bound in DISTANCES:
        if distance <= bound:
            return f"<={bound}"
    return f">{DISTANCES[-1]}"


def copies(model_dir: Path, records: list[dict], tools: tuple[str, ...]) -> dict[tuple[str, str], list[bool]]:
    """Per (`<tool>.<argument>`, distance bucket): whether greedy decoding writes each string
    argument's value, teacher-forced. The value's tokens are found by character offsets in the
    call's rendered text; the distance runs from the last token of its nearest earlier occurrence
    to the value's first token. Per (`<tool>.end<k>`, "-"): whether greedy decoding writes the
    token where the call's k-th argument ends (`training.sft.argument_end_positions`: the call
    goes on to the next argument, or closes). A call made again after a back-end fault is keyed
    `<tool> (retry)`."""
    import torch

    model, tokenizer = load_policy(model_dir)
    model.eval()
    schemas = list(tool_schemas(tools, "retail"))
    table: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for record in records:
        for _, seen, full, encoded, head in _calls_in_context(record, tokenizer, schemas, Counter()):
            call = (seen[-1].get("tool_calls") or [{}])[0]
            arguments = call.get("arguments") or {}
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
            call_start = offsets[head][0]
            tensor = torch.tensor([ids])
            with torch.no_grad():
                predicted = model(tensor).logits[0].argmax(-1).tolist()
            tool = call.get("name")
            if len(seen) > 1 and seen[-2].get("role") == "tool" and seen[-2].get("content") == INJECTED_ERROR:
                tool = f"{tool} (retry)"
            ends = [p for p in argument_end_positions(tensor, tokenizer)[0].nonzero().flatten().tolist() if p >= head]
            for number, p in enumerate(ends, start=1):
                table[(f"{tool}.end{number}", "-")].append(predicted[p - 1] == ids[p])
            for name, value in arguments.items():
                if call.get("name") == MESSAGE_TOOL or not isinstance(value, str) or not value:
                    continue  # a message is written, not copied
                at = full.find(value, call_start)
                if at < 0:
                    continue
                tokens = [i for i, (a, b) in enumerate(offsets) if a < at + len(value) and b > at and i >= head]
                greedy = all(predicted[p - 1] == ids[p] for p in tokens)
                earlier = full.rfind(value, 0, call_start)
                distance = None
                if earlier >= 0:
                    last = max(i for i, (a, b) in enumerate(offsets) if a < earlier + len(value) and b > earlier)
                    distance = tokens[0] - last
                table[(f"{tool}.{name}", _bucket(distance))].append(greedy)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--tool-list", choices=("level1", "all"), default="level1")
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--arguments", action="store_true", help="measure the calls' argument copies instead")
    parser.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        help="the expert's back-end calls refused at this rate, each retried (the shop stage's: 0.08)",
    )
    args = parser.parse_args()
    import torch

    from dataplane.scrub import using_pii_key

    torch.set_num_threads(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="decision-probe-"))
    tools = tools_for_levels({"4": 1.0}, "retail", args.tool_list)
    with using_pii_key(AgentRecipe().pii_key):
        records = [
            r for r in expert_day(args.conversations, work / "expert", args.fault_rate) if r["intent"] in LEVEL1_INTENTS
        ]
        print(f"{len(records)} expert conversations of {list(LEVEL1_INTENTS)}", flush=True)
        for model_dir in args.model:
            if args.arguments:
                for (argument, bucket), rows in sorted(copies(model_dir, records, tools).items()):
                    print(
                        f"model={model_dir} argument={argument} distance={bucket} values={len(rows)} "
                        f"greedy={sum(rows) / len(rows):.2f}",
                        flush=True,
                    )
                continue
            table = probe(model_dir, records, tools)
            for (intent, place), rows in sorted(table.items()):
                greedy = sum(g for g, _ in rows) / len(rows)
                mean_p = sum(p for _, p in rows) / len(rows)
                print(
                    f"model={model_dir} intent={intent} place={place} calls={len(rows)} "
                    f"greedy={greedy:.2f} p={mean_p:.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
