"""Tool-call formats of the open model families: a parser and a renderer per format, registered
under vLLM's ``--tool-call-parser`` names, plus auto-detection and the model-to-format table.

>>> from harness_gym.tool_formats import parse_text, render_calls
>>> parse_text(render_calls([("ls", {"path": "."})], "mistral"), "mistral").calls[0].arguments
{'path': '.'}
"""

from harness_gym.tool_formats.base import ParsedAction, ToolCall, ToolFormat
from harness_gym.tool_formats.models import ModelTableError, format_for_model, model_families
from harness_gym.tool_formats.registry import (
    ALIASES,
    DETECTION_ORDER,
    FORMATS,
    LOCAL_FORMATS,
    UnknownFormatError,
    detect,
    format_names,
    get_format,
    parse_text,
    render_calls,
    split_reasoning,
)
from harness_gym.tool_formats.rendering import render_prompt, template_takes_tools, text_messages, tools_block

__all__ = [
    "ALIASES",
    "DETECTION_ORDER",
    "FORMATS",
    "LOCAL_FORMATS",
    "ModelTableError",
    "ParsedAction",
    "ToolCall",
    "ToolFormat",
    "UnknownFormatError",
    "detect",
    "format_for_model",
    "format_names",
    "get_format",
    "model_families",
    "parse_text",
    "render_calls",
    "render_prompt",
    "split_reasoning",
    "template_takes_tools",
    "text_messages",
    "tools_block",
]
