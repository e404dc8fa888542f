"""The checkpoint store, where hybrid prompts leave checkpoints, and the modeled hybrid card's accounting."""

from __future__ import annotations

import numpy as np

from swarm_panel.runtime.core.checkpoints import CheckpointStore
from swarm_panel.runtime.core.config import SchedulerConfig
from swarm_panel.runtime.core.engine import PrefixOpKind, VirtualClock
from swarm_panel.runtime.core.request import Request, SamplingParams
from swarm_panel.runtime.modeled.engine import IM_END_ID, ModeledEngine
from swarm_panel.runtime.modeled.profiles import RX_9070_XT_QWEN35_9B
from swarm_panel.runtime.reuse.prefix_cache import MIN_CHECKPOINT_TOKENS, NEAR_TOKENS, Resumption
from swarm_panel.runtime.scheduling.scheduler import Scheduler
from swarm_panel.runtime.serving.engine_core import EngineCore


def test_the_store_finds_the_longest_checkpointed_prefix_and_evicts_the_coldest_within_its_budget():
    store = CheckpointStore(budget_bytes=300)
    tokens = np.arange(100)
    assert store.put(tokens[:20], b"a", 100) and store.put(tokens[:50], b"b", 100)
    assert store.longest(tokens, limit=99) == 50 and store.longest(tokens, limit=49) == 20
    other = np.concatenate([tokens[:30], [999] * 30])
    assert store.longest(other, limit=59) == 20  # its prefix diverges before 50
    assert store.get(tokens[:20]).data == b"a"  # used: now the most recent
    assert store.put(tokens[:70], b"c", 100) and store.put(tokens[:80], b"d", 100)
    assert store.num_bytes == 300 and store.num_evicted == 1 and not store.has(tokens[:50])
    assert store.longest(tokens, limit=60) == 20
    assert not store.put(tokens[:90], b"e", 301) and not store.has(tokens[:90])


def test_prompts_leave_checkpoints_at_the_system_prompt_and_one_token_short_of_their_end():
    resumption = Resumption(CheckpointStore(1 << 20), turn_end_tokens=frozenset({7}))
    chat = Request([1] + [5] * 40 + [7] + [6] * 60)  # a system message ended by token 7
    assert resumption.boundaries(chat) == [42, chat.num_prompt_tokens - 1]
    marked = Request([5] * 100, checkpoint_positions=(30,))
    assert resumption.boundaries(marked) == [30, 99]
    short = Request([5] * MIN_CHECKPOINT_TOKENS)
    assert resumption.boundaries(short) == []  # cheap to recompute: no extra step for a checkpoint
    assert resumption.chunk_end(marked, 0, 64) == (30, True, False)
    resumption.checkpoints.put(np.array(marked.token_ids[:30]), None, 1)
    assert resumption.chunk_end(marked, 0, 64) == (64, False, False)  # already there: no cut
    assert resumption.chunk_end(marked, 64, 100) == (99, True, False)


def follow_up(reply: int = 20, tool: int = 60, generation_prompt: int = 11) -> Request:
    """A second turn: system message, task, reply, tool result, each ended by turn-end token 7, then the
    generation prompt."""
    return Request([1] + [5] * 40 + [7] + [4] * 30 + [7] + [3] * reply + [7] + [6] * tool + [7]
                   + [2] * generation_prompt)


def test_a_generation_prompt_just_after_a_turn_end_makes_no_cut_of_its_own():
    resumption = Resumption(CheckpointStore(1 << 20), turn_end_tokens=frozenset({7}))
    chat = follow_up()
    ends = [42, 73, 94, 155]
    assert resumption.boundaries(chat) == ends  # not 166 (prompt - 1): 155 is 11 tokens before it
    longer = follow_up(generation_prompt=NEAR_TOKENS + 2)
    assert resumption.boundaries(longer) == [*ends, longer.num_prompt_tokens - 1]


def test_a_turn_end_just_past_a_chunks_start_is_checkpointed_at_the_start_without_a_cut():
    resumption = Resumption(CheckpointStore(1 << 20), turn_end_tokens=frozenset({7}))
    chat = follow_up()
    # A follow-up resumes after its reply's last sampled token (93): the reply's turn end (94) is one
    # token on, so the chunk runs to the tool result's end and the state at 93 is kept before it.
    assert resumption.chunk_end(chat, 93, chat.num_prompt_tokens) == (155, True, True)
    resumption.checkpoints.put(np.array(chat.token_ids[:93]), None, 1)
    assert resumption.chunk_end(chat, 93, chat.num_prompt_tokens) == (155, True, False)  # held already
    # The shared head's end is where other agents resume exactly: it stays a cut however near.
    assert resumption.chunk_end(chat, 40, chat.num_prompt_tokens) == (42, True, False)
    # Too short a start to resume at: the boundary stays.
    assert resumption.chunk_end(chat, 2, 64) == (42, True, False)


def greedy(tokens, n, agent):
    return Request(list(tokens), SamplingParams(max_tokens=n, ignore_eos=True), agent=agent)


def test_the_modeled_hybrid_card_charges_a_state_per_sequence_and_reuses_only_at_checkpoints():
    engine = ModeledEngine()
    assert engine.sequence_state_tokens == RX_9070_XT_QWEN35_9B.state_tokens_per_sequence > 1000
    plans = []
    step = engine.step
    engine.step = lambda plan: plans.append(plan) or step(plan)
    scheduler = Scheduler.for_engine(SchedulerConfig(num_lanes=4), engine)
    loop = EngineCore(scheduler, engine, VirtualClock())
    system = list(range(100, 200)) + [IM_END_ID]
    first = greedy(system + [1] * 10, 5, "a")
    scheduler.add(first, 0.0)
    loop.step()
    # Admitted: its prompt and one recurrent state, however short the prompt.
    assert scheduler.kv_used == first.num_computed_tokens + engine.sequence_state_tokens
    while scheduler.has_work:
        loop.step()
    assert scheduler.kv_cached == first.num_tokens - 1 + engine.sequence_state_tokens
    other = greedy(system + [2] * 10, 5, "b")
    scheduler.add(other, 0.0)
    while scheduler.has_work:
        loop.step()
    copies = [op for plan in plans for op in plan.prefix_ops if op.kind is PrefixOpKind.COPY]
    # The common prefix is the system message plus nothing: resumed exactly at its checkpoint.
    assert [(op.source, op.num_tokens) for op in copies] == [(first, len(system))]
    # One checkpoint, at the system message's end: each prompt ends 10 tokens past it, too near for a cut.
    assert engine.facts.memory_kind == "hybrid" and engine.figures().checkpoints == 1
