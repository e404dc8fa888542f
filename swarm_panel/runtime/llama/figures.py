"""The llama engine's live figures (LlamaEngine.figures), read from its context, sequences, runner and
thread governor when asked."""

from __future__ import annotations

from swarm_panel.runtime.llama.context import LlamaContext
from swarm_panel.runtime.llama.cpu_tuning.followers import ThreadGovernor
from swarm_panel.runtime.llama.facts import DecodeCallFit, LlamaFigures
from swarm_panel.runtime.llama.runner import StepRunner
from swarm_panel.runtime.llama.sequences import Sequences


def live_figures(context: LlamaContext, seqs: Sequences, runner: StepRunner, n_threads: int,
                 governor: ThreadGovernor | None) -> LlamaFigures:
    parked, store, checkpoints = seqs.parked, context.prefix_store, context.checkpoints
    fit = context.call_cost.coefficients if context.call_cost is not None else None
    return LlamaFigures(
        recurrent_state_bytes=context.memory.state_bytes,
        parked_sequences=len(parked), parked_bytes=parked.num_bytes,
        park_budget_bytes=parked.budget_bytes if seqs.parks_cached or seqs.parks_evicted else 0,
        n_threads=n_threads, threads_follow_contention=governor is not None,
        threads_most=n_threads if governor is None else governor.most,
        other_processes_cpu_cores=None if governor is None else round(governor.others_cores, 2),
        split_steps=runner.split_steps,
        decode_call_fit=None if fit is None else DecodeCallFit(round(fit.ubatch_ms, 3), round(fit.row_ms, 3),
                                                               round(1e3 * fit.cell_ms, 4)),
        stored_prefixes=0 if store is None else len(store),
        stored_prefix_bytes=0 if store is None else store.num_bytes,
        prefix_store_budget_bytes=0 if store is None else store.budget_bytes,
        checkpoints=0 if checkpoints is None else len(checkpoints),
        checkpoint_bytes=0 if checkpoints is None else checkpoints.num_bytes,
        checkpoint_budget_bytes=0 if checkpoints is None else checkpoints.budget_bytes)
