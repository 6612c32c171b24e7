"""What the proxy records: one :class:`ProxyRecord` per request, kept by the rollout's :class:`RolloutChannel`."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.external.policies import Policy, PolicyReply, PolicyRequest, text_of
from harness_gym.external.proxy import anthropic, chat_completions, gemini, openai_responses
from harness_gym.external.proxy.masking import Change, Masked, Original, ToolOutputMasking
from harness_gym.external.proxy.wire import arguments_object, loads

DIALECTS: dict[str, Any] = {
    "anthropic": anthropic,
    "chat": chat_completions,
    "responses": openai_responses,
    "gemini": gemini,
}


class ProxyRecord:
    """One request and the response sent back, verbatim (the response is the body as sent, SSE included).

    A record keeps the request's bytes and nothing parsed from them: a parsed JSON tree costs up to
    ~20x its size (``[[],[],...]``), and an agent may send up to the rollout's recorded-bytes budget.
    ``request`` and ``policy_request`` are parsed again from the bytes on each access (one record at
    a time: the episode's records are rebuilt in bounded memory, see ``rebuild peak`` in the red-team
    tests); a record built in memory (``raw`` None) keeps the ``PolicyRequest`` it is given."""

    def __init__(
        self,
        dialect: str,  # anthropic | chat | responses | gemini | models
        path: str,
        raw: bytes | None,  # the decoded request body as received
        response: str,
        status: int,
        policy_request: PolicyRequest | None = None,
        policy_reply: PolicyReply | None = None,
        side: bool = False,
        started: float = 0.0,
        ended: float = 0.0,
        error: str | None = None,
        headers: dict[str, str] | None = None,  # the request's headers, secrets redacted
        model: str | None = None,  # the model the request's path names (Gemini), for the parse again
    ) -> None:
        self.dialect, self.path, self.raw, self.response, self.status = dialect, path, raw, response, status
        self.policy_reply, self.side, self.started, self.ended = policy_reply, side, started, ended
        self.error, self.headers, self.model = error, dict(headers or {}), model
        self._parsed = False  # whether the body was parsed to a PolicyRequest (a generate request)
        self._request: PolicyRequest | None = None  # only where there are no bytes to parse again
        self.policy_request = policy_request
        self.masked: list[dict[str, Any]] = []  # results this request carried masked by the CLI, first time
        self.first_results: list[str] = []  # reply call ids whose first recorded result this request gave

    @property
    def request(self) -> dict[str, Any] | None:
        """The request body parsed (a new tree each time: callers hold one at a time)."""
        if self.raw is None:
            return None
        try:
            body = loads(self.raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        return body if isinstance(body, dict) else None

    @property
    def policy_request(self) -> PolicyRequest | None:
        """The canonical request, parsed again from the kept bytes (the parse is deterministic: Gemini's
        invented call ids are numbered), with this record's side tag."""
        if not self._parsed:
            return None
        if self._request is not None:
            return self._request
        body = self.request
        module = DIALECTS.get(self.dialect)
        if body is None or module is None:
            return None
        try:
            parsed: PolicyRequest = module.parse(body, self.model)
        except (ValueError, RecursionError):  # DialectError is a ValueError; it parsed once, at the request
            return None
        parsed.side = self.side
        return parsed

    @policy_request.setter
    def policy_request(self, request: PolicyRequest | None) -> None:
        self._parsed = request is not None
        self._request = request if self.raw is None else None

    def to_json(self) -> dict[str, Any]:
        """The record as JSON: ``request`` is the body's text as received (verbatim, and no parsed tree)."""
        request = self.policy_request
        return {
            "dialect": self.dialect,
            "path": self.path,
            "headers": self.headers,
            "request": self.raw.decode("utf-8", "replace") if self.raw is not None else None,
            "response": self.response,
            "status": self.status,
            "policy_request": _shallow(request) if request and self.raw is not None else _deep(request),
            "policy_reply": self.policy_reply.to_json() if self.policy_reply else None,
            "side": self.side,
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
            "masked_results": self.masked,
        }


def _shallow(request: PolicyRequest) -> dict[str, Any]:
    """A freshly parsed request as JSON without the deep copy of ``to_json`` (nothing else holds it)."""
    return {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}


def _deep(request: PolicyRequest | None) -> dict[str, Any] | None:
    return request.to_json() if request is not None else None


def turns_of(records: Sequence[Any]) -> list[Any]:
    """The agent turns among a rollout's records: answered by the policy, not side requests (a
    policy's reply exists only for a parsed request: nothing is parsed to find them)."""
    return [r for r in records if not r.side and r.policy_reply is not None and r._parsed]


MAX_REFUSED_RECORDS = 64  # refusals past the budget a rollout records (later ones are counted)
MAX_RECORDED_BYTES = 256 * 1024 * 1024  # request bytes one rollout's records may keep (CLIs send ~0.1-1 MiB)

# Claude Code's first system block carries a per-request billing header: not part of the prompt
_VOLATILE = re.compile(r"^x-anthropic-billing-header:.*$", re.MULTILINE)


def system_key(system: str) -> str:
    """A system prompt as compared for side-request tagging (the regex runs only where its header is)."""
    return (_VOLATILE.sub("", system) if "x-anthropic-billing-header:" in system else system).strip()


class RolloutChannel:
    """One rollout's view of the proxy: its secret, policy, budgets and records.

    ``max_requests`` bounds every authenticated request (a flood is refused with 429 and recorded);
    ``max_tokens`` bounds the completion tokens the policy reports over the rollout. When either is
    exceeded, ``exceeded`` says why and every later request is refused: the runner kills the sandbox.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        max_requests: int | None = None,
        max_tokens: int | None = None,
        models: tuple[str, ...] = (),
        on_close: Any = None,
        renamed_calls: tuple[str, ...] = (),
        masking: ToolOutputMasking | None = None,
    ) -> None:
        self.secret = "hg-" + secrets.token_urlsafe(24)
        self.policy = policy
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.models = models
        self.renamed_calls = renamed_calls  # names the CLI gives a refused call in its history (opencode)
        self.records: list[ProxyRecord] = []
        self.agent_turns = 0
        self.requests = 0
        self.completion_tokens = 0
        self.exceeded: str | None = None
        self.connections = 0  # connections open now that sent this channel's secret
        self.first_system: str | None = None
        self._system: tuple[str | None, str] = (None, "")  # the last system prompt tagged and its key
        self.tampered: str | None = None
        self.max_recorded_bytes = MAX_RECORDED_BYTES
        self.recorded_bytes = 0
        self.refused_records = 0  # requests refused past the budget, recorded
        self.refused_unrecorded = 0  # and those past MAX_REFUSED_RECORDS, only counted
        self.result_digests: dict[str, str] = {}  # reply call id -> sha256 of the first result a turn gave it
        self.masking = masking  # the CLI's own rewrite of old results, accepted where exact (masked_results)
        self.originals: dict[str, Original] = {}  # reply call id -> what the rule needs of its first result
        self.masked: dict[str, Masked] = {}  # reply call id -> the CLI's mask of its result, accepted
        self._unanswered: set[str] = set()  # calls whose first result's request is not recorded yet
        self.closed = False
        self.lock = threading.Lock()
        self.policy_lock = threading.Lock()  # a rollout's policy answers one request at a time
        self.body_lock = threading.Lock()  # a rollout's request bodies are read one at a time
        self._calls = CallIndex()  # the calls of the recorded replies, for ``verify``
        self._on_close = on_close

    def admit(self) -> str | None:
        """Count one request; the reason it is refused, if a budget forbids it."""
        with self.lock:
            self.requests += 1
            if self.exceeded is None and self.max_requests is not None and self.requests > self.max_requests:
                self.exceeded = f"more than {self.max_requests} requests"
            return self.exceeded

    def recorded(self, size: int) -> None:
        """Count a kept request body: past ``max_recorded_bytes`` the rollout's budget is exceeded, so the
        bodies one rollout pins in host memory are bounded (later requests are refused before being read)."""
        with self.lock:
            self.recorded_bytes += size
            if self.exceeded is None and self.recorded_bytes > self.max_recorded_bytes:
                self.exceeded = f"more than {self.max_recorded_bytes} bytes of request bodies"

    def connect(self, limit: int | None) -> bool:
        """Count one more open connection for this rollout; False (not counted) past ``limit``."""
        with self.lock:
            if limit is not None and self.connections >= limit:
                return False
            self.connections += 1
            return True

    def disconnect(self) -> None:
        with self.lock:
            self.connections = max(self.connections - 1, 0)

    def tag(self, request: PolicyRequest) -> PolicyRequest:
        """Mark a side request: no tools, or another system prompt than the rollout's first agent turn."""
        system = request.system
        with self.lock:
            if system != self._system[0]:  # the CLI resends one prompt: its key is made once (exact text)
                self._system = (system, system_key(system))
            key = self._system[1]
            side = not request.tools or (self.first_system is not None and key != self.first_system)
            if not side and self.first_system is None:
                self.first_system = key
            if not side:
                self.agent_turns += 1
        request.side = side
        return request

    def verify(
        self, request: PolicyRequest, body: Mapping[str, Any] | None = None, record: ProxyRecord | None = None
    ) -> str | None:
        """Check the history a request sends against the replies this channel recorded: every assistant
        tool call in it must be one the policy made. The agent cannot sit between the CLI and the proxy
        (the forwarder is the host's), but it can send requests of its own through its sandbox's port
        with the secret it reads from the CLI's environment, so a forged call is flagged here, and the
        first one makes the rollout an error (``tampered``). A later agent turn must carry the result an
        earlier one gave a call, or what the CLI's own masking rule (``masking``, from its file's
        ``masked_results``: :mod:`.masking`) makes of it; an accepted mask is kept in ``masked`` and on
        ``record``. ``body``: the request as sent (the rule reads its raw shape). The reason, or None."""
        with self.lock:  # the index grows as records are added, and is read under the same lock
            matched, forged = self._calls.match(request.messages, self.renamed_calls)
            reason = None
            if forged:
                reason = (
                    f"the request history claims {len(forged)} tool call(s) the policy never made "
                    f"(first: {forged[0]['name']!r} id {forged[0]['id']!r}): something between the CLI and "
                    "the proxy rewrote it"
                )
            elif not request.side:  # a later agent turn must carry the result an earlier one gave a call
                reason = self._results(request, body, matched, record)
            if reason is not None and self.tampered is None:
                self.tampered = reason
            return self.tampered

    def _results(
        self, request: PolicyRequest, body: Mapping[str, Any] | None, matched: dict[str, str], record: Any
    ) -> str | None:
        """The check of an agent turn's tool results (under ``lock``): the reason it fails, or None."""
        tools = [m for m in request.messages if isinstance(m, dict) and m.get("role") == "tool"]
        every = result_calls(request.messages, self._calls, matched)
        calls = _firsts(every)  # a call's later results in this history must repeat its first one
        masking = self.masking
        responses = masking.responses(body) if masking is not None else None
        if responses is not None and len(responses) != len(tools):
            responses = None  # not the shape the rule reads: a rewritten result stays a conflict
        changes: list[Change] = []
        given: dict[str, str] = {}  # call -> digest of its first result in this history
        for ordinal, (call_id, message) in enumerate(zip(every, tools, strict=True)):
            if call_id is None:
                continue
            text = text_of(message.get("content"))  # text: no part of a parsed tree kept
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            if given.setdefault(call_id, digest) != digest:
                return (
                    f"one agent request gives tool call {call_id!r} two different results: the policy reads "
                    "both, the transcript keeps the first (an agent's request with a forged result)"
                )
            if calls[ordinal] is None:
                continue  # the same result again
            new = call_id not in self.result_digests
            first = self.result_digests.setdefault(call_id, digest)
            if new and masking is not None and record is not None:
                record.first_results.append(call_id)  # unanswered until the record is added
                self._unanswered.add(call_id)
            if first == digest and masking is not None and call_id not in self.originals:
                if masking.looks_masked(text):
                    return (
                        f"tool call {call_id!r}: its first recorded result is already masked: the CLI masks "
                        "only a result it sent in full before (the proxy never saw the original)"
                    )
                if responses is not None:
                    self.originals[call_id] = masking.original(responses[ordinal])
            elif first != digest and (call_id not in self.masked or self.masked[call_id].digest != digest):
                changes.append(Change(ordinal, call_id, text, digest))
        if not changes:
            return None
        conflict = (
            f"two agent requests give tool call {changes[0].call_id!r} different results: the proxy "
            "cannot tell which one the CLI's tool returned (an agent's request with a forged result)"
        )
        if masking is None or responses is None:
            return conflict
        why, protected_from = self._layout(changes, calls)
        accepted: list[Masked] = []
        if why is None:
            why, accepted = masking.check(
                changes, calls, responses, protected_from, self.originals, self.masked, self.agent_turns
            )
        if why is not None:
            return f"{conflict}; not the CLI's own masking ({masking.rule}): {why}"
        for mask in accepted:
            self.masked[mask.call_id] = mask
        if record is not None:
            record.masked = [m.to_json() for m in accepted]
        return None

    def _layout(self, changes: Sequence[Change], calls: Sequence[str | None]) -> tuple[str | None, int]:
        """(why the request's results are not laid out as the CLI's history, or None; the first ordinal
        of its newest turn's results). The rule reads the history's order (newer output, the latest turn),
        so it is taken from the policy's replies, which the agent cannot reorder: results in the order
        of the turns that made their calls, the newest turn the latest reply answered (a model text after
        it, or a result moved before its call, protects nothing less). And a mask's original must have
        been answered: a request still in flight that first carried it may be recorded after the mask
        (the policy lock is not first come, first served), and the transcript keeps the first recorded."""
        early = next((c.call_id for c in changes if c.call_id in self._unanswered), None)
        if early is not None:
            return f"tool call {early!r}: the request that first carried its full result is not answered yet", 0
        turns = [self._calls.turn_of[self._calls.by_id[c][0]] if c is not None else None for c in calls]
        known = [t for t in turns if t is not None]
        if any(a > b for a, b in itertools.pairwise(known)):
            return "the results are not in the order of the turns that made their calls (not the CLI's history)", 0
        newest = max(known, default=0)
        return None, next((o for o, t in enumerate(turns) if t == newest), len(calls))

    def spent(self, reply: PolicyReply) -> None:
        with self.lock:
            self.completion_tokens += reply.completion_tokens
            if self.exceeded is None and self.max_tokens is not None and self.completion_tokens > self.max_tokens:
                self.exceeded = f"more than {self.max_tokens} completion tokens ({self.completion_tokens})"

    def add(self, record: ProxyRecord) -> None:
        """Keep a record; past the budget, only the first ``MAX_REFUSED_RECORDS`` refusals are kept and
        the rest counted (``refused_unrecorded``): a flood before the watch kills the sandbox would
        otherwise add a record, with its headers, per request."""
        with self.lock:
            if record.status == 429 and self.exceeded is not None:
                if self.refused_records >= MAX_REFUSED_RECORDS:
                    self.refused_unrecorded += 1
                    return
                self.refused_records += 1
            self.records.append(record)
            self._unanswered.difference_update(record.first_results)
            if record.policy_reply is not None:
                self._calls.add(record.policy_reply)

    @property
    def failed(self) -> str | None:
        """The first policy failure (an exception answered 500), if any: such a rollout is an error."""
        with self.lock:
            return next((r.error for r in self.records if r.status == 500 and r.error), None)

    def close(self) -> None:
        """Forget the secret: later requests with it get 401."""
        self.closed = True
        if self._on_close is not None:
            self._on_close(self)


def _normalized(arguments: Any) -> str:
    """Arguments compared as the JSON object the CLI was sent (a CLI may re-serialize them; a reply's
    malformed or non-object arguments reached it as ``{}``, see :func:`.wire.arguments_object`)."""
    if isinstance(arguments, str):
        arguments = arguments_object(arguments)
    return json.dumps(arguments if isinstance(arguments, dict) else {}, sort_keys=True)


def history_calls(messages: Any) -> list[dict[str, Any]]:
    """The assistant tool calls a canonical history claims: ``{"id", "name", "arguments"}`` each."""
    calls = []
    for message in messages or []:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {} if isinstance(call, dict) else {}
            calls.append(
                {
                    "id": str(call.get("id") or "") if isinstance(call, dict) else "",
                    "name": str(function.get("name") or ""),
                    "arguments": function.get("arguments"),
                }
            )
    return calls


class CallIndex:
    """The tool calls recorded replies made, indexed as they are added: a history check per request
    then costs O(calls claimed), not a rescan of every record (O(turns) a request, O(turns^2) a rollout)."""

    def __init__(self, replies: Sequence[PolicyReply] = ()) -> None:
        self.made: list[dict[str, Any]] = []
        self.by_id: dict[str, list[int]] = {}  # id -> positions in ``made``
        self.turn_of: list[int] = []  # the reply (0, 1, ...) each call of ``made`` came in
        self.replies = 0
        self._twins: dict[tuple[str, str], list[int]] = {}  # (name, arguments normalized) -> positions
        self._keyed = 0  # the first position not in ``_twins`` yet (keys are made only when needed)
        # a history's arguments text -> its normalized form: every request resends the same calls (Gemini's
        # are matched by arguments), so each text is decoded once; keyed by the exact text, bounded
        self._normal: dict[str, str] = {}
        for reply in replies:
            self.add(reply)

    def add(self, reply: PolicyReply) -> None:
        for call in reply.tool_calls:
            self.by_id.setdefault(str(call["id"]), []).append(len(self.made))
            self.made.append(call)
            self.turn_of.append(self.replies)
        self.replies += 1

    def _by_name_and_arguments(self) -> dict[tuple[str, str], list[int]]:
        for position in range(self._keyed, len(self.made)):
            call = self.made[position]
            if isinstance(call["name"], str):  # another name equals no history's (always a string)
                self._twins.setdefault((call["name"], _normalized(call["arguments"])), []).append(position)
        self._keyed = len(self.made)
        return self._twins

    def _normalized(self, arguments: Any) -> str:
        if not isinstance(arguments, str):
            return _normalized(arguments)
        normal = self._normal.get(arguments)
        if normal is None:
            if len(self._normal) >= 4096:
                self._normal.clear()
            normal = self._normal[arguments] = _normalized(arguments)
        return normal

    def match(self, messages: Any, renamed: tuple[str, ...] = ()) -> tuple[dict[str, str], list[dict[str, Any]]]:
        """Match each call a history claims to a call of a recorded reply: by id (with the same name,
        or a name in ``renamed``: a CLI that rewrites a refused call, as opencode names an unknown
        tool's call ``invalid``), or, where the wire has no call ids (Gemini), by name and arguments,
        each made call claimed once. (history id -> reply id, forged calls)."""
        taken: set[int] = set()
        matched: dict[str, str] = {}
        rest = []
        for call in history_calls(messages):  # ids first, so a forged copy of a real call cannot take its place
            positions = self.by_id.get(call["id"], [])
            known = self.made[positions[-1]] if positions else None
            if known is not None and (known["name"] == call["name"] or call["name"] in renamed):
                matched[call["id"]] = str(known["id"])
                # one made call equal to it is claimed (the same call may have been made twice)
                twin = next((p for p in positions if p not in taken and self.made[p] == known), None)
                if twin is not None:
                    taken.add(twin)
            else:
                rest.append(call)
        forged = []
        for call in rest:
            group = self._by_name_and_arguments().get((call["name"], self._normalized(call["arguments"])), [])
            twin = next((p for p in group if p not in taken), None)
            if twin is None:
                forged.append(call)
            else:
                taken.add(twin)
                matched[call["id"]] = str(self.made[twin]["id"])
        return matched, forged


def match_calls(
    messages: Any, replies: list[PolicyReply], renamed: tuple[str, ...] = ()
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """:meth:`CallIndex.match` over ``replies``."""
    return CallIndex(replies).match(messages, renamed)


def forged_calls(messages: Any, replies: list[PolicyReply], renamed: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The calls a history claims that no recorded reply made."""
    return match_calls(messages, replies, renamed)[1]


def result_calls(messages: Any, index: CallIndex, matched: dict[str, str] | None = None) -> list[str | None]:
    """The reply call id each tool result of a history answers, in order (None: no reply made the
    call; a call answered twice appears twice), matched by call id (Gemini's wire has no ids: by
    function name, in order, each call once). ``matched``: ``index.match(messages)``'s ids where the
    caller has them (one match a request)."""
    if matched is None:
        matched = index.match(messages)[0]
    made: dict[str, dict[str, Any]] | None = None  # id -> call, made only for Gemini's results
    answered: set[str] = set()
    calls: list[str | None] = []
    for message in messages or []:
        if not isinstance(message, dict) or message.get("role") != "tool":
            continue
        said = str(message.get("tool_call_id"))
        call_id = matched.get(said) or (said if said in index.by_id else None)
        if call_id is None:  # Gemini: a result names its function, not a call id
            made = made if made is not None else {str(c["id"]): c for c in index.made}
            call_id = next((i for i, c in made.items() if c["name"] == said and i not in answered), None)
        calls.append(call_id)
        if call_id is not None:
            answered.add(call_id)
    return calls


def result_entries(messages: Any, index: CallIndex, matched: dict[str, str] | None = None) -> list[str | None]:
    """:func:`result_calls` with a call's later results in the history None (its first one answers it)."""
    return _firsts(result_calls(messages, index, matched))


def _firsts(calls: Sequence[str | None]) -> list[str | None]:
    seen: set[str] = set()
    entries: list[str | None] = []
    for call_id in calls:
        entries.append(call_id if call_id not in seen else None)
        if call_id is not None:
            seen.add(call_id)
    return entries


def results_in(messages: Any, index: CallIndex, matched: dict[str, str] | None = None) -> dict[str, str]:
    """Reply call id -> the tool result (its text) one history carries for it (:func:`result_entries`).
    Results for calls no reply made are left out."""
    tools = [m for m in messages or [] if isinstance(m, dict) and m.get("role") == "tool"]
    entries = result_entries(messages, index, matched)
    return {c: text_of(m.get("content")) for c, m in zip(entries, tools, strict=True) if c is not None}


def call_results(records: Sequence[ProxyRecord]) -> dict[str, str]:
    """Reply call id -> the tool result the agent turns carried for it. Every agent turn resends the
    history, so all carry the same one; one that differs is flagged live (``RolloutChannel.verify``)
    and the episode is an error, so which one is kept here decides nothing."""
    index = CallIndex([r.policy_reply for r in records if r.policy_reply is not None])
    results: dict[str, str] = {}
    for record in turns_of(records)[1:]:
        for call_id, text in results_in(record.policy_request.messages, index).items():
            results.setdefault(call_id, text)
    return results
