"""TRL: harness-gym environments for ``GRPOTrainer(environment_factory=...)`` (TRL 1.16).

TRL turns every public method of the environment class into a tool (name, signature and Google-style
docstring become the schema), calls ``reset(**row)`` before each rollout and ``get_reward()`` after
it. :func:`environment_factory` builds such a class for one harness: one method per harness tool,
under the name, description and parameters the harness presents (aliases, opaque identifiers and
distractors included). Each tool call is one environment step.

The harness's system prompt, task, workflow instructions and skills are the dataset's ``prompt``
(``harness-gym export prompts``), because TRL only appends ``reset()``'s text to the last user
message. TRL passes tool methods their arguments only, so plan-first workflows (W1/W2) need the
assistant's text: :class:`HarnessGRPOTrainer` (a ``GRPOTrainer``) hands each rollout's messages to
its environment; under a plain ``GRPOTrainer`` a W1/W2 harness is refused at ``reset``. C1/C2
(rewritten history) and per-episode name resampling are refused: see ``base.SUPPORT``.

    from harness_gym.integrations.trl import HarnessGRPOTrainer, environment_factory
    trainer = HarnessGRPOTrainer(model, args=GRPOConfig(...), train_dataset=load_dataset("json", data_files=rows),
                                 environment_factory=environment_factory("S1T2O1C0W1", tasks="builtin:train"))
"""

from __future__ import annotations

import inspect
import json
import keyword
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import GenericAlias
from typing import Any

from harness_gym.chat import chat_messages
from harness_gym.env import HarnessEnv
from harness_gym.factors.tool_interface import BoundTool
from harness_gym.integrations.base import UnsupportedHarness, check_harness, make_env
from harness_gym.tasks import Task

try:
    from trl import GRPOTrainer
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError('the TRL adapter needs TRL: pip install "harness-gym[trl]"') from exc

_PY_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}
_SHOWN_KEYS = {"type", "description", "enum", "items"}
_RESERVED = {"reset", "get_reward"}


# --------------------------------------------------------------------------- tool methods


def _python_type(name: str, schema: Mapping[str, Any], tool: str) -> Any:
    kind = schema.get("type")
    if kind == "array":
        item = schema.get("items", {}).get("type")
        return GenericAlias(list, (_PY_TYPES[item],)) if item in _PY_TYPES else list  # list[<type>], built at run time
    if kind in _PY_TYPES:
        return _PY_TYPES[kind]
    raise UnsupportedHarness(
        f"trl cannot present tool {tool!r}: parameter {name!r} has JSON type {kind!r}, which a Python "
        "signature (what TRL builds tool schemas from) cannot express (factor T)"
    )


def _parameter_doc(name: str, schema: Mapping[str, Any]) -> str:
    """One ``Args:`` line: the description, then what the signature cannot carry, then the choices."""
    text = " ".join(str(schema.get("description") or name).split())
    extra = {k: v for k, v in schema.items() if k not in _SHOWN_KEYS}
    items = schema.get("items")
    if isinstance(items, Mapping) and set(items) - {"type"}:
        extra["items"] = items
    if extra:
        text += f" (schema: {json.dumps(extra, ensure_ascii=False)})"
    if schema.get("enum"):
        text += f" (choices: {json.dumps(schema['enum'], ensure_ascii=False)})"
    return f"    {name}: {text}"


def tool_method(tool: BoundTool) -> Callable[..., str]:
    """A method named and documented like the harness tool, whose call is one environment step."""
    if not tool.name.isidentifier() or keyword.iskeyword(tool.name) or tool.name.startswith("_"):
        raise UnsupportedHarness(f"trl cannot present tool {tool.name!r}: TRL tools are Python methods (factor T)")
    if tool.name in _RESERVED:
        raise UnsupportedHarness(f"trl cannot present tool {tool.name!r}: TRL reserves that method name (factor T)")
    properties: Mapping[str, Any] = tool.parameters.get("properties", {})
    required = set(tool.parameters.get("required", []))
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for name, schema in properties.items():
        if not name.isidentifier() or keyword.iskeyword(name):
            raise UnsupportedHarness(
                f"trl cannot present tool {tool.name!r}: parameter {name!r} is not a Python identifier, and TRL "
                "builds tool schemas from method signatures (factor T)"
            )
        kind = _python_type(name, schema, tool.name)
        annotations[name] = kind if name in required else kind | None
        default = inspect.Parameter.empty if name in required else None
        parameters.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[name])
        )
    parameters.sort(key=lambda p: p.default is not inspect.Parameter.empty)  # required first
    description = tool.description.strip() or tool.name
    doc = description + (
        "\n\nArgs:\n" + "\n".join(_parameter_doc(n, s) for n, s in properties.items()) if properties else ""
    )

    def call(self: HarnessToolEnvironment, **arguments: Any) -> str:
        return self._call(tool.name, {k: v for k, v in arguments.items() if v is not None})

    call.__name__ = call.__qualname__ = tool.name
    call.__doc__ = doc + "\n\nReturns:\n    The tool's output."
    call.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    _check_schema(call, tool)
    return call


def _check_schema(method: Callable[..., Any], tool: BoundTool) -> None:
    """The schema TRL will show must name the same parameters, types, requirements and choices."""
    from transformers.utils import get_json_schema  # heavy (transformers): only for this check

    shown = get_json_schema(method)["function"]
    parameters = shown["parameters"]
    properties = tool.parameters.get("properties", {})
    problems = []
    if shown["name"] != tool.name:
        problems.append("name")
    if set(parameters.get("properties", {})) != set(properties):
        problems.append("parameter names")
    if set(parameters.get("required", [])) != set(tool.parameters.get("required", [])):
        problems.append("required parameters")
    for name, schema in properties.items():
        got = parameters["properties"].get(name, {})
        got_type = got.get("type")
        got_type = next(t for t in got_type if t != "null") if isinstance(got_type, list) else got_type
        if got_type != schema.get("type") or got.get("enum") != schema.get("enum"):
            problems.append(f"parameter {name}")
    if problems:
        raise UnsupportedHarness(
            f"trl cannot present tool {tool.name!r} faithfully: its {', '.join(problems)} would differ (factor T)"
        )


# --------------------------------------------------------------------------- the environment class


class HarnessToolEnvironment:
    """Base of the classes :func:`environment_factory` builds. Only ``reset``, ``get_reward`` and the
    tool methods are public: TRL would present any other public method as a tool."""

    _harness: str | Mapping[str, Any]
    _env_options: Mapping[str, Any]
    _tasks: str | Sequence[Task] | None

    def __init__(self) -> None:
        self._env: HarnessEnv = make_env(self._harness, self._tasks, **self._env_options)
        # a finalizer, not __del__: it runs when the instance is collected or, at the latest, at exit
        # before the interpreter tears its modules down (a __del__ then raised TypeError tracebacks)
        self._closer = weakref.finalize(self, self._env.close)
        self._turns: list[dict[str, Any]] | None = None  # the rollout's messages, from HarnessGRPOTrainer
        self._text_turn: int | None = None  # id of the assistant message whose text was handed on
        self._reward: float | None = None

    def reset(self, **row: Any) -> str | None:
        """Start the episode a dataset row asks for (``task_id``, ``seed``, ``harness``; see
        ``harness-gym export prompts``). The row's ``prompt`` must be the episode's opening messages."""
        if "task_id" not in row:
            raise ValueError(
                "the dataset row has no task_id: build the dataset with `harness-gym export prompts` "
                "(each row names its task, seed and harness)"
            )
        harness = row.get("harness")
        if harness is not None and harness != self._harness:
            raise ValueError(
                f"this environment class runs harness {self._harness!r} but the row asks for {harness!r}; pass "
                "environment_factory={harness: environment_factory(harness), ...} and an `environment` column"
            )
        if self._env.harness_spec["workflow"].get("plan_required") and not self._trainer_bound:
            check_harness(
                "trl", self._env.harness_spec, refuse={"W1/W2": "a plain GRPOTrainer passes tool methods only their "
                "arguments, never the assistant's text, so the plan gate would turn every call away; use "
                "harness_gym.integrations.trl.HarnessGRPOTrainer"},
            )  # fmt: skip
        observation, _ = self._env.reset(seed=int(row.get("seed", 0)), options={"task_id": row["task_id"]})
        self._reward = None
        self._turns = None  # the trainer binds this rollout's messages after generating
        self._text_turn = None
        expected = chat_messages(observation["messages"], (), "openai")
        prompt = row.get("prompt")
        if isinstance(prompt, list) and [m.get("content") for m in prompt] != [m["content"] for m in expected]:
            raise ValueError(
                f"the row's prompt is not this episode's opening (task {row['task_id']}, seed {row.get('seed', 0)}, "
                f"harness {self._env.harness_spec['name']}): re-export the dataset with this harness-gym version"
            )
        return None

    _trainer_bound = False  # set on instances a HarnessGRPOTrainer created

    def get_reward(self) -> float:
        """The task grader's reward. A rollout that ended without the finishing call is graded as it stands."""
        if self._reward is None:
            if self._env.done:
                raise RuntimeError("get_reward() before reset(): no episode ran")
            self._reward, _ = self._env.truncate("the rollout ended before the finishing tool was called")
        return self._reward

    def _bind_turns(self, turns: list[dict[str, Any]]) -> None:
        self._turns = turns

    def _assistant_text(self) -> str:
        """The text of the assistant message that made this call, once per message."""
        if self._turns is None:
            return ""
        message = next((m for m in reversed(self._turns) if m.get("role") == "assistant"), None)
        if message is None or id(message) == self._text_turn:
            return ""
        self._text_turn = id(message)
        content = message.get("content") or ""
        return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._env.done:
            raise RuntimeError("the episode is over; no more tool calls are run")
        action = {
            "role": "assistant",
            "content": self._assistant_text(),
            "tool_calls": [{"id": f"call_{self._env.steps}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}],
        }  # fmt: skip
        _, reward, terminated, truncated, info = self._env.step(action)
        if terminated or truncated:
            self._reward = float(reward)
        messages = info["new_messages"]
        # the tool's answer first; hook, workflow and budget messages follow it in the same result
        return "\n\n".join(m["content"] for m in messages if m.get("content"))


def environment_factory(
    harness: str | Mapping[str, Any],
    *,
    tasks: str | Sequence[Task] | None = "builtin",
    sandbox: str | None = None,
    max_steps: int | None = None,
    include_skills: bool = True,
    resample_names: bool = False,
) -> type[HarnessToolEnvironment]:
    """The class to pass as ``GRPOTrainer(environment_factory=...)`` for one harness.

    Raises :class:`UnsupportedHarness` for a harness TRL cannot carry (C1/C2, resampled names, tools
    a Python signature cannot express); W1/W2 needs :class:`HarnessGRPOTrainer`."""
    options = {"sandbox": sandbox, "max_steps": max_steps, "include_skills": include_skills}
    probe = make_env(harness, tasks, **options)
    try:
        spec = probe.harness_spec
        check_harness("trl", spec, resample_names=resample_names, include_skills=include_skills)
        methods = {t.name: tool_method(t) for t in probe.tool_interface.tools.values()}
    finally:
        probe.close()
    name = "HarnessEnv_" + "".join(c if c.isalnum() else "_" for c in str(spec.get("config") or spec["name"]))
    namespace: dict[str, Any] = {"_harness": harness, "_tasks": tasks, "_env_options": options, **methods}
    return type(name, (HarnessToolEnvironment,), namespace)


# --------------------------------------------------------------------------- the trainer


def _bound_factory(factory: Callable[[], Any]) -> Callable[[], Any]:
    def create() -> Any:
        instance = factory()
        if isinstance(instance, HarnessToolEnvironment):
            instance._trainer_bound = True
        return instance

    return create


class HarnessGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that also hands each rollout's messages to its harness environment, so the
    plan gate of W1/W2 harnesses reads the assistant's text (TRL's tool calls carry only arguments)."""

    def __init__(self, *args: Any, environment_factory: Any = None, **kwargs: Any) -> None:
        if isinstance(environment_factory, Mapping):
            environment_factory = {k: _bound_factory(f) for k, f in environment_factory.items()}
        elif environment_factory is not None:
            environment_factory = _bound_factory(environment_factory)
        kwargs["environment_factory"] = environment_factory
        super().__init__(*args, **kwargs)

    def _tool_call_loop(self, *args: Any, **kwargs: Any) -> Any:
        completions = kwargs["completions"] if "completions" in kwargs else args[3]
        environments: list[Any] = self.environments or []
        for environment, turns in zip(environments, completions, strict=False):
            if isinstance(environment, HarnessToolEnvironment):
                environment._bind_turns(turns)
        return super()._tool_call_loop(*args, **kwargs)
