"""What real agents say: a shared system prompt, varied coding tasks, and short tool results.

A real-agents swarm sends these as chat messages and lets the model decide when to stop, so output
lengths vary as they do in a real swarm: a one-line answer beside a long plan. Each agent works
through conversations of a few turns; after every reply a tool result is appended and the whole
conversation is resent, as coding agents do.
"""

from __future__ import annotations

SYSTEM_PROMPT = (
    "You are a coding agent in a team of agents working on one Python repository. "
    "Keep every answer short and concrete: a few sentences or one small code block. "
    "You can ask for a tool by writing its name and arguments, for example: run_tests(\"tests/test_api.py\"), "
    "read_file(\"src/app.py\"), search(\"def parse\"). "
    "When you have enough information, give the answer directly."
)

# Short questions beside requests for plans: the model's own stop tokens make the lengths vary.
TASKS = (
    "Which git command shows who last changed each line of a file? Answer in one line.",
    "Write a Python function that checks whether a string is a palindrome, ignoring case.",
    "Explain the difference between a list and a tuple in Python.",
    "Plan how to add retries with exponential backoff to an HTTP client. List the steps.",
    "What does the HTTP status code 429 mean, and how should a client react to it?",
    "Write a unit test with pytest for a function add(a, b) that returns the sum of two numbers.",
    "Our CI fails with 'ModuleNotFoundError: No module named yaml'. What is the likely fix?",
    "Describe how you would find a memory leak in a long-running Python service.",
    "Write a SQL query that counts the orders per customer in a table orders(customer_id, id).",
    "Suggest a clear name for a function that removes duplicate items from a list and keeps the order.",
    "Explain what a race condition is, with a short example.",
    "Write a shell command that finds every Python file larger than 100 kilobytes in a folder.",
    "How do you read a JSON file in Python and print one of its keys? Show the code.",
    "List three ways to make a slow SQL query faster.",
    "Write a short docstring for a function that parses a date in the format YYYY-MM-DD.",
    "Outline a plan to split a 2,000-line module into smaller modules without breaking imports.",
)

TOOL_RESULTS = (
    "Tool result: run_tests -> 12 passed, 1 failed: test_parse_empty expected [] but got None.",
    "Tool result: read_file -> def parse(text):\n    if not text:\n        return None\n    return text.split(',')",
    "Tool result: search -> src/client.py:88: response = session.get(url, timeout=5)",
    "Tool result: run_tests -> all 13 tests passed in 0.42 s.",
    "Tool result: read_file -> [tool.pytest.ini_options]\ntestpaths = [\"tests\"]",
    "Tool result: search -> no matches.",
)

FOLLOW_UP = "Continue with the next step, briefly."
# Greedy decoding on a small model loops on a phrase until max_tokens; a mild penalty lets it end on its
# own. Deterministic, so every server and every policy still sees the same tokens.
REPEAT_PENALTY = 1.15


def task_for(agent: int, conversation: int) -> str:
    """Agents start on different tasks and move through the list, so every moment holds a mix."""
    return TASKS[(agent * 5 + conversation * 3) % len(TASKS)]


def tool_result_for(agent: int, turn: int) -> str:
    return f"{TOOL_RESULTS[(agent + turn) % len(TOOL_RESULTS)]}\n{FOLLOW_UP}"


class AgentConversation:
    """One agent's chat: the shared system prompt, its task, then reply and tool result per turn."""

    def __init__(self, agent: int, conversation: int = 0) -> None:
        self.agent = agent
        self.turn = 0
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": task_for(agent, conversation)},
        ]

    def replied(self, reply: str) -> None:
        """The reply ends this turn; the tool result it led to opens the next."""
        self.messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": tool_result_for(self.agent, self.turn)},
        ]
        self.turn += 1
