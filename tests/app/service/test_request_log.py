import logging

from swarm_panel.app.service.agents import AgentActivity, RequestLog, RequestRecord
from swarm_panel.app.service.prompt_progress import ProgressLog, prompt_progress
from swarm_panel.runtime.core.request import Request, SamplingParams


def test_a_line_per_request_errors_at_warning_with_their_message(caplog):
    log = RequestLog(max_records=3)
    with caplog.at_level(logging.INFO, logger="swarm_panel.requests"):
        log.record(RequestRecord("claude-code-1", "/v1/messages", 200, prompt_tokens=20928, computed_tokens=1032,
                                 reused_tokens=19896, output_tokens=57, finish="tool_calls", ttft_s=44.2, seconds=51.0))
        log.record(RequestRecord("opencode-1", "/v1/chat/completions", 400, finish="error",
                                 note="the prompt is 40000 tokens; the context holds 32768"))
    ok, refused = caplog.records
    assert ok.levelno == logging.INFO and refused.levelno == logging.WARNING
    assert ok.getMessage() == ("claude-code-1 /v1/messages 200 prompt=20928 computed=1032 reused=19896 output=57 "
                               "finish=tool_calls ttft=44.20s time=51.00s")
    assert "400" in refused.getMessage() and "the context holds 32768" in refused.getMessage()
    assert [r.agent for r in log.records(agent="opencode-1")] == ["opencode-1"]
    for i in range(3):
        log.record(RequestRecord(f"a{i}", "/v1/completions", 200))
    assert [r.agent for r in log.records()] == ["a0", "a1", "a2"]  # a bounded ring: the oldest go
    assert all(r.ended > 0 for r in log.records())


def test_the_progress_of_prompts_still_computing():
    activity = AgentActivity()
    long = Request(list(range(5000)), SamplingParams(max_tokens=4), agent="claude-code-1")
    long.num_computed_tokens, long.num_cached_tokens = 3000, 1000
    short = Request(list(range(900)), SamplingParams(max_tokens=4), agent="aider-1")
    decoding = Request(list(range(5000)), SamplingParams(max_tokens=4), agent="codex-1")
    decoding.num_computed_tokens = 5000
    decoding.token_ids.append(7)  # its first output token: past its prompt
    for request in (long, short, decoding):
        activity.began(request.agent, request, "asked")
    progress = prompt_progress(activity)
    assert set(progress) == {"claude-code-1", "aider-1"}
    assert progress["claude-code-1"].text() == "3,000 / 5,000"
    # The log names only prompts with much left to compute: a short one is done in seconds.
    assert ProgressLog(activity).lines() == ["claude-code-1: prompt 3,000 of 5,000 tokens in (60%, 1,000 reused)"]
