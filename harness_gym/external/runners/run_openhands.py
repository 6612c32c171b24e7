"""Run the OpenHands SDK agent on one task, headless (shipped into the openhands install tree).

Usage: python run_openhands.py --model openai/M --base-url URL --workspace DIR --max-turns N TASK
(the API key comes from OPENAI_API_KEY). Exit 0 when the conversation finished, 1 otherwise.
"""

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--max-turns", type=int, default=30)
    parser.add_argument("task")
    args = parser.parse_args()

    from openhands.sdk import LLM, Agent, Conversation, Tool
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.task_tracker import TaskTrackerTool
    from openhands.tools.terminal import TerminalTool
    from pydantic import SecretStr

    llm = LLM(
        model=args.model,
        base_url=args.base_url,
        api_key=SecretStr(os.environ["OPENAI_API_KEY"]),
        usage_id="agent",
        num_retries=0,
    )
    tools = [Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name), Tool(name=TaskTrackerTool.name)]
    agent = Agent(llm=llm, tools=tools)
    conversation = Conversation(agent=agent, workspace=args.workspace, max_iteration_per_run=args.max_turns)
    conversation.send_message(args.task)
    conversation.run()
    status = str(getattr(conversation.state, "execution_status", ""))
    print(f"openhands: finished with status {status}", flush=True)
    return 0 if "error" not in status.lower() and "stuck" not in status.lower() else 1


if __name__ == "__main__":
    sys.exit(main())
