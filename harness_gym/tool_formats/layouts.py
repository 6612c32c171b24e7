"""System-prompt tool blocks as the families' chat templates write them (Qwen3, Qwen3-Coder,
GLM-4.5, DeepSeek V3 / V3.1). Formats without one here use the generic block of
:meth:`harness_gym.tool_formats.base.ToolFormat.render_tools`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats.base import dumps, tool_function


def _typed(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": tool_function(t)} for t in tools]


def qwen3_hermes(tools: Sequence[Mapping[str, Any]]) -> str:
    signatures = "\n".join(dumps(t) for t in _typed(tools))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{signatures}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def qwen3_coder(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = ["# Tools", "", "You have access to the following functions:", "", "<tools>"]
    for tool in tools:
        function = tool_function(tool)
        lines += ["<function>", f"<name>{function.get('name', '')}</name>"]
        if function.get("description"):
            lines.append(f"<description>{str(function['description']).strip()}</description>")
        lines.append("<parameters>")
        for key, schema in ((function.get("parameters") or {}).get("properties") or {}).items():
            schema = schema if isinstance(schema, Mapping) else {}
            lines += ["<parameter>", f"<name>{key}</name>"]
            if "type" in schema:
                lines.append(f"<type>{schema['type']}</type>")
            if schema.get("description"):
                lines.append(f"<description>{str(schema['description']).strip()}</description>")
            lines.append("</parameter>")
        required = (function.get("parameters") or {}).get("required")
        if required:
            lines.append(f"<required>{json.dumps(required)}</required>")
        lines += ["</parameters>", "</function>"]
    lines.append("</tools>")
    return "\n".join(lines) + (
        "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
        "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
        "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
        "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
        "- Function calls MUST follow the specified format: an inner <function=...></function> block must be "
        "nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
        "- You may provide optional reasoning for your function call in natural language BEFORE the function "
        "call, but NOT after\n- If there is no function call available, answer the question like normal with "
        "your current knowledge and do not tell the user about function calls\n</IMPORTANT>"
    )


def glm45(tools: Sequence[Mapping[str, Any]]) -> str:
    signatures = "\n".join(dumps(t) for t in _typed(tools))
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{signatures}\n</tools>\n\n"
        "For each function call, output the function name and arguments within the following XML format:\n"
        "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
        "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
    )


def deepseek_v31(tools: Sequence[Mapping[str, Any]]) -> str:
    parts = ["## Tools", "You have access to the following tools:", ""]
    for tool in tools:
        function = tool_function(tool)
        parts += [
            f"### {function.get('name', '')}",
            f"Description: {function.get('description', '')}",
            "",
            f"Parameters: {dumps(function.get('parameters') or {})}",
            "",
        ]
    parts.append(
        "IMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
        "{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
        "- `tool_call_name` must be an exact match to one of the available tools\n"
        "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
        "- For multiple tool calls, chain them directly without separators or spaces"
    )
    return "\n".join(parts)


def deepseek_v3(tools: Sequence[Mapping[str, Any]]) -> str:
    listed = "\n\n".join(
        f"- `{tool_function(t).get('name', '')}`:\n```json\n{dumps(tool_function(t))}\n```" for t in tools
    )
    return (
        "## Tools\n\n### Function\n\nYou have the following functions available:\n\n"
        f"{listed}\n\nTo call a function, write:\n"
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGUMENTS\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
    )


def kimi_k2(tools: Sequence[Mapping[str, Any]]) -> str:
    return "# Tools\n\n" + dumps(_typed(tools))


#: format name -> tools block writer
TOOLS_BLOCKS = {
    "hermes": qwen3_hermes,
    "qwen3_xml": qwen3_coder,
    "glm45": glm45,
    "deepseek_v31": deepseek_v31,
    "deepseek_v3": deepseek_v3,
    "kimi_k2": kimi_k2,
}
