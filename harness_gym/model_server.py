"""A small OpenAI-compatible server for a local transformers model.

``harness-gym serve`` answers ``POST /v1/chat/completions`` (and ``GET /v1/models``) with a model
loaded in-process, by default the packaged SmolLM2-135M-Instruct. When the request carries
``tools``, they are described in the system prompt and the model's ``<tool_call>`` blocks are
returned as OpenAI ``tool_calls`` (like vLLM's hermes tool parser). It lets any OpenAI client,
including :class:`~harness_gym.agents.OpenAIChatAgent`, use a local model without a GPU; for
real throughput, serve the model with vLLM instead.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness_gym.agents.huggingface import load_model, stops_at_exit
from harness_gym.prompting import text_messages
from harness_gym.tool_calls import parse_action


class ModelServer:
    """An OpenAI-compatible HTTP server over one local model; ``start()`` runs it in a thread."""

    def __init__(
        self,
        model: str | None = None,
        gguf_file: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str | None = None,
        max_new_tokens: int = 256,
        context_tokens: int | None = None,
        tool_prompt: str = "text",
    ) -> None:
        """``tool_prompt``: ``text`` describes request tools in the system prompt (like a chat
        template with tool support); ``template`` passes them to the model's own chat template, as
        vLLM does (SmolLM2's drops them). ``context_tokens`` (default: the model's) bounds prompt
        plus answer; a longer request is refused with a 400 worded like vLLM's."""
        if tool_prompt not in ("text", "template"):
            raise ValueError(f"tool_prompt must be text or template, got {tool_prompt!r}")
        self.tokenizer, self.model, self.lock = load_model(model, gguf_file)
        self.name = name or (model or "SmolLM2-135M-Instruct")
        self.default_max_tokens = max_new_tokens
        self.context_tokens = context_tokens or int(getattr(self.model.config, "max_position_embeddings", 2048))
        self.tool_prompt = tool_prompt
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ModelServer:
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        import torch  # the optional hf extra (heavy): imported once a request needs the model

        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty list")
        tools = body.get("tools") or []
        template_options: dict[str, Any] = {"add_generation_prompt": True, "return_tensors": "pt"}
        if tools and self.tool_prompt == "text":
            prompt = text_messages(messages, tools)
        else:
            prompt = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
            if tools:
                template_options["tools"] = tools
        encoded = self.tokenizer.apply_chat_template(prompt, **template_options)
        ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or self.default_max_tokens)
        if int(ids.shape[1]) + max_tokens > self.context_tokens:
            raise ValueError(
                f"This model's maximum context length is {self.context_tokens} tokens. However, you requested "
                f"{int(ids.shape[1]) + max_tokens} tokens ({int(ids.shape[1])} in the messages, {max_tokens} in "
                "the completion). Please reduce the length of the messages or completion."
            )
        temperature = float(body.get("temperature") or 0.0)
        options: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "pad_token_id": self.tokenizer.eos_token_id,
            "do_sample": temperature > 0,
        }
        if temperature > 0:
            options["temperature"] = temperature
        with self.lock, torch.no_grad():
            output = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), stopping_criteria=stops_at_exit(), **options
            )
        new = output[0][ids.shape[1] :]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop" if int(new.shape[0]) < max_tokens else "length"
        if tools:
            parsed = parse_action(text, "hermes")
            calls = [c for c in parsed.calls if not c.error]
            if calls:
                message = {
                    "role": "assistant",
                    "content": parsed.text or None,
                    "tool_calls": [
                        {
                            "id": f"call_{uuid.uuid4().hex[:12]}",
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in calls
                    ],
                }
                finish = "tool_calls"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": int(ids.shape[1]),
                "completion_tokens": int(new.shape[0]),
                "total_tokens": int(ids.shape[1] + new.shape[0]),
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    self._send(200, server.complete(body))
                except (ValueError, KeyError, TypeError) as exc:
                    self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
