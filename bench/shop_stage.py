"""Whether the recipe's optional shop stage makes the shipped agent serve the whole shop in part,
and what it costs at level 1.

The shipped agent (S8) is built on level 1 only: the customer's opening states who they are and
what they want, and the agent knows order status and cancellations. Served on the whole shop
(every intent, the playbook's persona mix, 8% back-end faults, identity not stated) it completes
nothing. The recipe's shop stage (`domains.retail.tiny_agent`, `AgentRecipe.shop_stages`) imitates
the whole shop held by the scripted expert restricted to the level-1 intents, which asks who the
customer is, asks why before cancelling and hands every other request to a person
(`shop_demonstrations`). This bench runs that stage from `--model` (default: the shipped agent)
with the recipe's settings, `--stages` times in a row (each a fresh optimiser, seeds as the recipe
numbers them after the phrase stage), with the level-1 demonstrations mixed in unless `--shop-only`,
then measures the result and the model it started from, each:

- **served on the whole shop**: `--conversations` conversations of one simulated day on a shop of
  1,500 customers (seed 11), served greedily behind the PII gateway as the demo serves
  (`orchestration.cli.demo.serving_policy`), at the served traffic's defaults; completed
  conversations per intent and per persona, and the first thing the agent did;
- **at level 1**: greedy success on the recipe's 100 held-out customers x 2 trials
  (`bench/shipped_agent.measure`, the manifest's figure).

`--level1-steps N` then trains N steps on the level-1 demonstrations alone at a fine-tuning rate
(lr 1e-4, verified only, short results), asking whether level 1 comes back and the whole shop stays.
`--tool-list all` lists every tool in the stage's prompts and serves with them (the curriculum's
`tool_list: all`), where the default lists level 1's six: the conversations are the same (the
expert uses the six and hands the rest over), but only an agent whose prompt lists a tool can
learn, from a person's resolution of a hand-over, to call it.
The stage makes each order status a single-word token of its own first and weights it as the
cancel reasons (`AgentRecipe.shop_phrases`), as the recipe's shop stage does; `--without-status-tokens`
leaves that out (the stage as it was before 2026-12-06, 09:40 UTC). It also weighs each message's
first word as a tool's name (`SFTSettings.weighted_message_opening`: after a read, what the message
says is the choice between the two intents); `--without-message-opening` leaves that out (the stage
as it was before 2026-12-06, 12:30 UTC).
The stage cuts the order id's `#W` out as a token of its own first (`AgentRecipe.shop_markers`):
the recipe's tokenizer merged it with the words before it, so the id in a call and the id in the
customer's words began with different tokens; `--without-id-marker` leaves that out (the stage as
it was before 2026-12-06, 16:25 UTC). Its conversations meet back-end faults at the served rate and
the expert retries each (`AgentRecipe.shop_fault_rate`); `--without-faults` leaves them out (the
stage as it was before 2026-12-06, 16:40 UTC).
It weighs the token where each argument of a call ends (the next begins or the call closes) as a
tool's name (`SFTSettings.weighted_argument_ends`: served, cancellations closed the call after the
order id and left out the reason); `--without-argument-ends` leaves that out (the stage as it was
before 2026-12-06, 19:30 UTC).
It makes each customer name of its conversations a token of its own and weights it as the statuses
(`AgentRecipe.shop_names`: the recipe's tokenizer spelt a name a few letters a token, and names were
copied cut short or garbled, most of all when a call was made again after a fault);
`--without-name-tokens` leaves that out (the stage as it was before 2026-12-07, 03:00 UTC).
`--payment-markers` cuts each payment method's opening (`credit_card_`, `gift_card_`, `paypal_`) out
as a token of its own beside `#W`, so a payment method's digits are a copy as an order id's are.
`--weighted-markers` weights each marker (`AgentRecipe.shop_markers`) as the statuses: which source a
payment method names is a choice among three tokens (measured with the cancellation's question moved
back before the read: every proposal then named `credit_card_`, and the digits' copy was lost; not
in the recipe).
Its relabelled copies swap a payment method's source (`credit_card_`, `gift_card_`, `paypal_`) by
one permutation per copy (`SFTSettings.relabel_swaps_prefixes`: most of the shop's methods are credit
cards, and the agent proposed `credit_card_` whichever the customer named); `--without-source-swap`
leaves that out (the stage as it was before 2026-12-08, 00:10 UTC).
`--intent-weights modify_order_payment=0.3` draws the stage's conversations at the production mix
with those intents' weights replaced (a rare intent the expert serves is then seen more often).
`--handles a,b,c` has the expert serve those intents and hand the rest over (one intent more than
level 1's, say). `--every-intent` has the expert serve every intent (handing over only what no tool serves; use
with `--tool-list all`): the recipe teaching the whole shop at once. `--skip-before` measures only
the stage's agent, not `--model`.
`--compact-shop` asks whether the two forms are what interferes: the whole-shop demonstrations in
the short tool results level 1 uses, and the whole shop served so too (a diagnostic: the served
traffic has full results, so this bench patches the serving module's conversation start).

    .venv/bin/python bench/shop_stage.py [--stages 1] [--steps 450] [--shop-only] [--level1-steps N] [--compact-shop]
        [--tool-list level1|all] [--without-status-tokens] [--without-message-opening] [--conversations 200]
        [--without-id-marker] [--without-faults] [--without-argument-ends] [--without-name-tokens]
        [--every-intent] [--handles a,b] [--payment-markers] [--weighted-markers] [--intent-weights i=w,...]
        [--without-source-swap]
        [--skip-before] [--model DIR] [--work DIR]

The last line printed is `stages=<n> steps=<n> shop_only=<bool> compact_shop=<bool> tool_list=<list> status_tokens=<bool>
message_opening=<bool> argument_ends=<bool> name_tokens=<bool> markers=<list> weighted_markers=<bool> fault_rate=<x> every_intent=<bool> handles=<list>
intent_weights=<pairs> source_swap=<bool> served_before=<k>/<n>
served_after=<k>/<n> level1_before=<x> level1_after=<x> seconds=<t>`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from domains.retail.domain import RetailDomain  # noqa: E402
from domains.retail.level1 import LEVEL1_INTENTS, LEVEL1_TOOLS, level1_demonstration  # noqa: E402
from domains.retail.tiny_agent import (  # noqa: E402
    AgentRecipe,
    level1_tasks,
    recipe_sft_settings,
    shop_demonstrations,
    shop_overrides,
    shop_words,
    with_level1,
    with_shop_phrase_tokens,
)
from domains.retail.traffic.scenarios import DEFAULT_INTENT_MIX, validate_intent_mix  # noqa: E402
from domains.retail.traffic.simulate import simulate  # noqa: E402
from orchestration.cli.demo import serving_policy  # noqa: E402
from training.curriculum import tools_for_levels  # noqa: E402
from training.sft import warm_start  # noqa: E402
from training.tiny.manifest import SHIPPED_AGENT_DIR  # noqa: E402

SERVED_SEED = 11
SERVED_CUSTOMERS = 1500
# A payment method's id is its source and seven digits (`paypal_9560141`): the source's opening cut
# out as a token of its own makes the digits a copy as `#W` makes an order id's.
PAYMENT_MARKERS = RetailDomain.interchangeable_prefixes[0]
# The shop stages come after the recipe's seven phases, and the recipe seeds a stage with its number.
FIRST_SHOP_PHASE = 8


def day_records(summary: dict) -> list[dict]:
    """The records a `simulate` run wrote (its summary's `files`), in order."""
    return [json.loads(line) for path in summary["files"] for line in Path(path).read_text().splitlines() if line]


def served(model: Path, conversations: int, out: Path, tool_list: str = "level1") -> dict:
    """One day of the whole shop served by `model` with the tools of `tool_list` (the curriculum's
    lists at level 4: the six the agent was built with by default): completed per intent and
    persona, first acts."""
    summary = simulate(
        days=1,
        per_day=conversations,
        seed=SERVED_SEED,
        out_dir=out,
        policy=serving_policy(str(model), level=None, tool_list=tool_list),
        n_users=SERVED_CUSTOMERS,
        policy_version="bench/1",
    )
    records = day_records(summary)
    table: dict[str, Counter] = defaultdict(Counter)
    first: Counter = Counter()
    for record in records:
        for key in (record["intent"], f"persona {record['user_scenario'].get('persona')}"):
            table[key][record["outcome"]] += 1
        act = next((m for m in record["messages"] if m["role"] == "assistant"), {})
        first[(act.get("tool_calls") or [{"name": "a text reply"}])[0]["name"]] += 1
    return {
        "completed": summary["outcomes"].get("completed", 0),
        "n": len(records),
        "outcomes": summary["outcomes"],
        "by": {key: dict(counts) for key, counts in sorted(table.items())},
        "first_acts": dict(first.most_common()),
        # Per conversation (the same ids for every model served on the same day): its customer and
        # whether it completed, for paired comparisons.
        "conversations": {
            record["interaction_id"]: [record["customer_id"], record["outcome"] == "completed"] for record in records
        },
    }


def without_conversations(figures: dict) -> dict:
    """`served`'s figures without the per-conversation table, for printing."""
    return {key: value for key, value in figures.items() if key != "conversations"}


def serve_compact() -> None:
    """Whole-shop conversations start with short tool results and level 1's tools (`--compact-shop`)."""
    from domains.retail.traffic import serving
    from domains.retail.traffic.agents import scenario_row
    from training.sandbox.rollout import start_conversation

    def compact_start(scenario, seed, tool_fault_rate=0.0):
        row = scenario_row(scenario)
        return start_conversation(
            row, seed, customer_id=scenario.user_id, compact=True, tools=LEVEL1_TOOLS, tool_fault_rate=tool_fault_rate
        )

    serving.scenario_conversation = compact_start


def level1(model: Path, held: list[dict]) -> float:
    sys.path.append(str(ROOT / "bench"))  # appended: bench/ must not shadow the product's packages
    from shipped_agent import measure

    return measure(model, held)["success_rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SHIPPED_AGENT_DIR)
    parser.add_argument("--stages", type=int, default=1)
    parser.add_argument("--steps", type=int, default=AgentRecipe.shop_steps)
    parser.add_argument("--shop-only", action="store_true", help="leave the level-1 demonstrations out")
    parser.add_argument("--level1-steps", type=int, default=0, help="then this many level-1 steps at lr 1e-4")
    parser.add_argument("--compact-shop", action="store_true", help="the whole shop in short tool results too")
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument(
        "--every-intent",
        action="store_true",
        help="the expert serves every intent (with --tool-list all), not only level 1's, handing over only 'other'",
    )
    parser.add_argument("--skip-before", action="store_true", help="measure only the stage's agent, not --model")
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--without-status-tokens",
        action="store_true",
        help="the stage without the recipe's shop_phrases (order statuses as weighted tokens of their own)",
    )
    parser.add_argument(
        "--without-message-opening",
        action="store_true",
        help="the stage without a message's first word weighted as a tool's name (weighted_message_opening)",
    )
    parser.add_argument(
        "--without-argument-ends",
        action="store_true",
        help="the stage without the tokens that end a call's argument weighted (weighted_argument_ends)",
    )
    parser.add_argument(
        "--without-faults",
        action="store_true",
        help="the stage's conversations without back-end faults (AgentRecipe.shop_fault_rate 0)",
    )
    parser.add_argument(
        "--without-id-marker",
        action="store_true",
        help="the stage without `#W` cut out as a token of its own (AgentRecipe.shop_markers)",
    )
    parser.add_argument(
        "--without-name-tokens",
        action="store_true",
        help="the stage without customer names as weighted tokens of their own (AgentRecipe.shop_names)",
    )
    parser.add_argument(
        "--payment-markers",
        action="store_true",
        help="the stage with each payment method's opening (credit_card_, gift_card_, paypal_) cut out as "
        "a token of its own, beside `#W` (AgentRecipe.shop_markers)",
    )
    parser.add_argument(
        "--weighted-markers",
        action="store_true",
        help="the stage with each marker (`#W`, and with --payment-markers each payment method's opening) "
        "weighted as the statuses",
    )
    parser.add_argument(
        "--handles",
        default=None,
        help="comma-separated intents the expert serves (default: level 1's; --every-intent: all), "
        "handing the rest to a person",
    )
    parser.add_argument(
        "--without-source-swap",
        action="store_true",
        help="the stage without a payment method's source swapped in its relabelled copies "
        "(SFTSettings.relabel_swaps_prefixes)",
    )
    parser.add_argument(
        "--intent-weights",
        default=None,
        help="comma-separated intent=weight pairs that replace those intents' weights in the production mix "
        "the stage's conversations are drawn at (modify_order_payment=0.3: more of a rare intent)",
    )
    parser.add_argument(
        "--tool-list",
        choices=("level1", "all"),
        default="level1",
        help="the tools the stage's prompts list and the agent serves with (the curriculum's tool_list)",
    )
    args = parser.parse_args()
    if args.stages < 1 or args.steps < 1 or args.conversations < 1:
        parser.error("--stages, --steps and --conversations must be at least 1")
    work = args.work or Path(tempfile.mkdtemp(prefix="shop-stage-"))
    started = time.monotonic()
    recipe = AgentRecipe()
    if args.without_status_tokens:
        recipe = replace(recipe, shop_phrases=())
    if args.without_id_marker:
        recipe = replace(recipe, shop_markers=())
    if args.without_faults:
        recipe = replace(recipe, shop_fault_rate=0.0)
    if args.payment_markers:
        recipe = replace(recipe, shop_markers=(*recipe.shop_markers, *PAYMENT_MARKERS))
    handles = None if args.every_intent else LEVEL1_INTENTS
    if args.handles:
        handles = tuple(dict.fromkeys(args.handles.split(",")))
        validate_intent_mix(dict.fromkeys(handles, 1.0))  # names an unknown intent, or none
    mix = None
    if args.intent_weights:
        try:
            weights = {
                name: float(weight) for name, weight in (pair.split("=") for pair in args.intent_weights.split(","))
            }
        except ValueError:
            parser.error(f"--intent-weights: expected intent=weight pairs, got {args.intent_weights!r}")
        mix = validate_intent_mix({**DEFAULT_INTENT_MIX, **weights})
    train, held = level1_tasks(work / "tasks", recipe)
    demos = shop_demonstrations(work / "shop", recipe, handles, mix)
    print(f"stage conversations per intent: {dict(Counter(demo['intent'] for demo in demos))}", flush=True)
    if args.without_name_tokens:
        recipe = replace(recipe, shop_names=False)
    words = shop_words(recipe, demos)
    print(f"{len(words)} words as tokens of their own: {', '.join(words)}", flush=True)
    if args.compact_shop:
        demos = [{**demo, "compact": True} for demo in demos]
        serve_compact()
    if not args.shop_only:
        demos = with_level1(demos, [level1_demonstration(task) for task in train])
    print(f"{len(demos)} demonstrations ({'whole shop only' if args.shop_only else 'with level 1'})", flush=True)
    settings = replace(
        recipe_sft_settings(recipe, args.threads),
        steps=args.steps,
        verified_only=False,
        tools=tools_for_levels({"4": 1.0}, "retail", args.tool_list),
        **shop_overrides(recipe, words),
    )
    if args.without_message_opening:
        settings = replace(settings, weighted_message_opening=False)
    if args.without_argument_ends:
        settings = replace(settings, weighted_argument_ends=False)
    if args.without_source_swap:
        settings = replace(settings, relabel_swaps_prefixes=False)
    if args.weighted_markers:
        settings = replace(settings, weighted_phrases=(*settings.weighted_phrases, *recipe.shop_markers))
    current = with_shop_phrase_tokens(args.model, work / "shop-phrased", recipe, words)
    for stage in range(args.stages):
        folder = work / f"shop{FIRST_SHOP_PHASE + stage}"
        summary = warm_start(current, demos, folder, replace(settings, seed=FIRST_SHOP_PHASE + stage))
        print(f"stage {folder.name}: train loss {summary['train_loss']:.4f}", flush=True)
        current = folder
    if args.level1_steps:
        refresh = replace(
            settings,
            steps=args.level1_steps,
            learning_rate=1e-4,
            verified_only=True,
            compact=True,
            seed=FIRST_SHOP_PHASE + args.stages + 1,
        )
        level1_demos = [level1_demonstration(task) for task in train]
        summary = warm_start(current, level1_demos, work / "level1-refresh", refresh)
        print(f"level-1 refresh: train loss {summary['train_loss']:.4f}", flush=True)
        current = work / "level1-refresh"
    before = None if args.skip_before else served(args.model, args.conversations, work / "served-before")
    after = served(current, args.conversations, work / "served-after", args.tool_list)
    shown = (("before", before), ("after", after)) if before else (("after", after),)
    print(json.dumps({name: without_conversations(f) for name, f in shown}, indent=1))
    l1_before, l1_after = (float("nan") if args.skip_before else level1(args.model, held)), level1(current, held)
    print(
        f"stages={args.stages} steps={args.steps} shop_only={args.shop_only} compact_shop={args.compact_shop} "
        f"tool_list={args.tool_list} status_tokens={not args.without_status_tokens} "
        f"message_opening={not args.without_message_opening} argument_ends={settings.weighted_argument_ends} "
        f"name_tokens={recipe.shop_names} markers={list(recipe.shop_markers)} weighted_markers={args.weighted_markers} fault_rate={recipe.shop_fault_rate} "
        f"every_intent={args.every_intent} handles={list(handles) if handles else 'all'} intent_weights={args.intent_weights or '-'} "
        f"source_swap={settings.relabel_swaps_prefixes} "
        f"served_before={before['completed'] if before else '-'}/{before['n'] if before else '-'} "
        f"served_after={after['completed']}/{after['n']} "
        f"level1_before={l1_before:.3f} level1_after={l1_after:.3f} seconds={time.monotonic() - started:.0f}"
    )


if __name__ == "__main__":
    main()
