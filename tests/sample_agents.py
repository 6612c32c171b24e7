"""Agents for ``--agent python:sample_agents:NAME`` in the tests, in every shape README allows."""

from harness_gym.agents import NullAgent

FINISH = "Plan:\n1. finish\n" + '<tool_call>{"name": "finish", "arguments": {"message": "done"}}</tool_call>'


def make_agent():
    """A plain function returning an agent."""
    return NullAgent()


class SubmittingAgent:
    """An agent class (built once per episode)."""

    name = "submitting"

    def act(self, observation):
        return FINISH


def policy(messages, tools):
    """A (messages, tools) callable: it is the agent itself."""
    return FINISH


def make_policy():
    """A factory returning a (messages, tools) callable."""
    return policy


def make_nothing():
    return None


def crash(messages, tools):
    raise RuntimeError("agent crashed")
