"""Valid tool calls of an external episode, counted from the proxy's records (not assumed).

A policy's tool call is valid when its name is one of the tools the request offered, its arguments
parse as a JSON object that validates against that tool's JSON schema, and the CLI did not refuse
it: the tool result the next requests carry for it (matched by call id, as in the canonical
transcript) is not the CLI's own "unknown tool / invalid input" answer. Those answers differ per CLI
and are data, ``rejected_call_results`` in the CLI's file (regular expressions, measured with
``tests/data/external/record_rejections.py``). mini-swe-agent drops a refused call from the history
and answers in a user message instead: a call no later request answers is checked against the
next agent request's last message.

The counts use the bench's field names: ``tool_calls`` (attempts), ``valid_tool_calls``,
``parse_errors`` (arguments that are not a JSON object, or a call written in a reply's text that the
backend's tool parser did not take, as the engine's text parser would count it) and ``tool_errors``
(an unknown tool, a schema violation or the CLI's refusal); ``invalid_calls`` lists each and why.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from harness_gym.external.catalog import ExternalCli
from harness_gym.external.policies import text_of
from harness_gym.external.proxy.recording import call_results, turns_of
from harness_gym.tool_calls import parse_action

MAX_LISTED = 50  # invalid calls listed in a record (all are counted)


@functools.lru_cache(maxsize=256)
def _schema_validator(schema_json: str) -> jsonschema.protocols.Validator | None:
    """A validator for one tool's parameters schema; None when the schema itself is invalid (the
    CLI's own bug: the call is then not held against the policy)."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


def _offered(request: Any) -> dict[str, Any]:
    """Tool name -> its parameters schema, for the tools one canonical request offered."""
    offered: dict[str, Any] = {}
    for tool in request.tools or []:
        function = tool.get("function") or {} if isinstance(tool, Mapping) else {}
        if function.get("name"):
            parameters = function.get("parameters")
            offered[str(function["name"])] = parameters if isinstance(parameters, Mapping) else None
    return offered


def check_call(call: Mapping[str, Any], offered: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, reason) when a call is invalid against the tools offered (kind ``parse`` or ``tool``), else None."""
    name = str(call.get("name") or "")
    if name not in offered:
        return ("tool", f"unknown tool {name!r}")
    raw = call.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        return ("parse", f"arguments are not JSON: {exc}")
    if not isinstance(arguments, dict):
        return ("parse", f"arguments are a JSON {type(arguments).__name__}, not an object")
    schema = offered[name]
    if schema:
        validator = _schema_validator(json.dumps(schema, sort_keys=True))
        error = jsonschema.exceptions.best_match(validator.iter_errors(arguments)) if validator else None
        if error is not None:
            return ("tool", f"arguments fail {name}'s schema at {error.json_path}: {error.message[:200]}")
    return None


def count_valid_calls(cli: ExternalCli, records: Sequence[Any]) -> dict[str, Any]:
    """The validity counts of one episode's proxy records (see the module docstring)."""
    patterns = [re.compile(p) for p in cli.data.get("rejected_call_results") or []]
    turns = turns_of(records)
    results = call_results(records)  # text already
    counts: dict[str, Any] = {"tool_calls": 0, "valid_tool_calls": 0, "parse_errors": 0, "tool_errors": 0}
    invalid: list[dict[str, str]] = []
    for index, record in enumerate(turns):
        offered = _offered(record.policy_request)
        following = turns[index + 1].policy_request.messages if index + 1 < len(turns) else []
        if not record.policy_reply.tool_calls and record.policy_reply.content:
            # a call written in the reply's text that the backend's parser did not take: the CLI never
            # saw a call, but the model attempted one (the engine's text parser would count it too)
            parsed = parse_action(record.policy_reply.content, "auto")
            for number, call in enumerate(parsed.calls):
                counts["tool_calls"] += 1
                counts["parse_errors"] += 1
                if len(invalid) < MAX_LISTED:
                    reason = f"a {parsed.format} call in the reply's text, not parsed by the backend"
                    invalid.append({"id": f"text:{index}:{number}", "name": str(call.name or ""), "reason": reason})
        for call in record.policy_reply.tool_calls:
            counts["tool_calls"] += 1
            problem = check_call(call, offered)
            if problem is None:
                answer = results.get(str(call.get("id")))
                if answer is None and following and isinstance(following[-1], Mapping):
                    last = following[-1]  # a CLI that answers a refused call in a user message
                    answer = text_of(last.get("content")) if last.get("role") == "user" else None
                if answer is not None and any(p.search(answer) for p in patterns):
                    problem = ("tool", f"{cli.id} refused it: {answer[:200]}")
            if problem is None:
                counts["valid_tool_calls"] += 1
                continue
            counts["parse_errors" if problem[0] == "parse" else "tool_errors"] += 1
            if len(invalid) < MAX_LISTED:
                invalid.append({"id": str(call.get("id")), "name": str(call.get("name")), "reason": problem[1]})
    counts["invalid_calls"] = invalid
    return counts
