"""ClawGym and PinchBench suites from fixtures in their real formats, written by the tests."""

import json
import textwrap
import warnings

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.tasks import TaskError, load_tasks, validate_suite

pytestmark = requires_bwrap
WS = "/root/.openclaw/workspace"


def bash(env, command):
    return env.step(f"<tool_call>{json.dumps({'name': 'execute_bash', 'arguments': {'command': command}})}</tool_call>")


def finish(env, message="done"):
    return env.step(
        f"{message}\n<tool_call>{json.dumps({'name': 'finish', 'arguments': {'message': message}})}</tool_call>"
    )


def write(path, text, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    if mode:
        path.chmod(mode)


@pytest.fixture
def clawgym(tmp_path, clawgym_world):
    root = tmp_path / "clawgym"
    task = root / "task_0000"
    write(
        task / "data_entry.json",
        json.dumps(
            {
                "task_id": "task_0000",
                "user_query": "Sum the numbers in numbers.txt and write the total to total.txt.",
                "input_mount_dir": WS,
                "metadata": {"category": "files", "grading_type": "automated"},
            }
        ),
    )
    write(task / "input_files" / "numbers.txt", "3\n4\n5\n")
    write(
        task / "reward" / "check.py",
        f"""
        import json, os
        path = "{WS}/total.txt"
        scores = {{"exists": float(os.path.exists(path))}}
        scores["correct"] = float(scores["exists"] == 1.0 and open(path).read().strip() == "12")
        print(json.dumps(scores))
        """,
    )
    write(
        task / "reward" / "reward.sh",
        """
        out=$(python reward/check.py)
        echo "$out"
        python -c "import json, sys; s = json.loads(sys.argv[1]); print(sum(s.values()) / len(s))" "$out"
        """,
    )
    chat = root / "task_0001"
    write(
        chat / "data_entry.json",
        json.dumps(
            {
                "task_id": "task_0001",
                "user_query": "What is six times seven? Answer in your final message.",
                "input_mount_dir": WS,
                "metadata": {"category": "chat", "grading_type": "automated"},
            }
        ),
    )
    write(
        chat / "reward" / "reward.sh",
        """
        python3 -c "import json, os; p = json.load(open(os.environ['OPENCLAW_REWARD_PAYLOAD'])); print(1.0 if '42' in p['final_message'] and p['transcript'][0]['message']['role'] == 'user' else 0.0)"
        """,
    )
    slow = root / "task_0002"
    write(
        slow / "data_entry.json",
        json.dumps({"task_id": "task_0002", "user_query": "Anything.", "metadata": {"grader_timeout_s": 2}}),
    )
    write(slow / "reward" / "reward.sh", "sleep 100\n")
    silent = root / "task_0003"
    write(silent / "data_entry.json", json.dumps({"task_id": "task_0003", "user_query": "Anything."}))
    write(silent / "reward" / "reward.sh", "echo looks good\n")
    write(root / "task_0004" / "reward" / "reward.sh", "echo 1\n")  # no data_entry.json
    write(root / "task_0005" / "data_entry.json", json.dumps({"task_id": "task_0005"}))  # no user_query
    write(
        root / "task_0006" / "data_entry.json", json.dumps({"task_id": "task_0006", "user_query": "x"})
    )  # no reward.sh
    write(
        root / "task_0007" / "data_entry.json",
        json.dumps({"task_id": "task_0007", "user_query": "x", "input_mount_dir": "/usr/evil"}),
    )
    write(root / "task_0007" / "reward" / "reward.sh", "echo 1\n")
    return root


def test_clawgym_suite_lists_broken_tasks_by_name(clawgym):
    suite = validate_suite(f"clawgym:{clawgym}")
    assert [t.id for t in suite.tasks] == ["task_0000", "task_0001", "task_0002", "task_0003"]
    text = "\n".join(suite.errors)
    assert "task_0004: no data_entry.json" in text and "task_0005: data_entry.json lacks user_query" in text
    assert "task_0006: no reward/reward.sh" in text and "task_0007: input_mount_dir" in text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(load_tasks(f"clawgym:{clawgym}")) == 4
    assert sum("skipping a broken task" in str(w.message) for w in caught) == 4
    with pytest.raises(TaskError, match="does not exist"):
        load_tasks("clawgym:/nowhere")


def test_clawgym_workspace_grader_paths_and_hidden_reward(clawgym):
    env = HarnessEnv(tasks=f"clawgym:{clawgym}")
    env.reset(seed=0, options={"task_id": "task_0000"})
    obs, *_ = bash(env, f"pwd; cat {WS}/numbers.txt; ls reward 2>&1")
    out = obs["messages"][-1]["content"]
    assert out.startswith(f"{WS}\n3\n4\n5\n") and "No such file" in out  # the grader is hidden
    bash(env, "echo 12 > total.txt")
    _, reward, terminated, _, info = finish(env)
    assert terminated and reward == 1.0 and info["reward_breakdown"] == {"exists": 1.0, "correct": 1.0}
    env.reset(seed=0, options={"task_id": "task_0000"})
    bash(env, "echo 11 > total.txt")
    _, reward, _, _, info = finish(env)
    assert reward == 0.5 and info["reward_breakdown"]["correct"] == 0.0
    env.close()


def test_clawgym_chat_payload_and_grader_failures(clawgym):
    env = HarnessEnv(tasks=f"clawgym:{clawgym}")
    env.reset(seed=0, options={"task_id": "task_0001"})
    assert finish(env, "The answer is 42.")[1] == 1.0
    env.reset(seed=0, options={"task_id": "task_0001"})
    assert finish(env, "The answer is 41.")[1] == 0.0
    env.reset(seed=0, options={"task_id": "task_0002"})
    _, reward, _, _, info = finish(env)
    assert reward == 0.0 and "task_0002: the grader timed out after 2 s" in info["grader_error"]
    env.reset(seed=0, options={"task_id": "task_0003"})
    _, reward, _, _, info = finish(env)
    assert reward == 0.0 and "task_0003: the grader's last line is not a reward: 'looks good'" in info["grader_error"]
    env.close()


def test_clawgym_corpus_lines(tmp_path, monkeypatch, clawgym_world):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    from harness_gym.tasks import clawgym as module

    corpus = tmp_path / "corpus.jsonl"
    lines = [
        {
            "prompt": "Write hello to greeting.txt.",
            "rule": "file",
            "origin_template": "id: greet_001\nkind: file",
            "input_files": [
                {"file_path": "notes.md", "content": "hi"},
                {
                    "file_path": "reward/reward.sh",
                    "content": f'test "$(cat {WS}/greeting.txt)" = hello && echo 1.0 || echo 0.0\n',
                },
            ],
            "hook_code": "",
        },
        {
            "prompt": "Create ok.flag.",
            "origin_template": "id: flag_002",
            "input_files": [],
            "hook_code": f"import os\nprint(1.0 if os.path.exists('{WS}/ok.flag') else 0.0)\n",
        },
        {
            "prompt": "Escape.",
            "origin_template": "id: evil_003",
            "input_files": [{"file_path": "../../etc/x", "content": ""}],
        },
    ]
    corpus.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    suite = module.load_clawgym(str(corpus))
    assert (tmp_path / "cache" / "clawgym").is_dir()
    assert [t.id for t in suite.tasks] == ["greet_001", "flag_002"]  # corpus order
    assert any("evil_003" in e and "unsafe" in e for e in suite.errors) and any("line 4" in e for e in suite.errors)
    env = HarnessEnv(tasks=suite.tasks)
    env.reset(seed=0, options={"task_id": "greet_001"})
    assert bash(env, "cat notes.md")[0]["messages"][-1]["content"] == "hi"
    bash(env, "echo hello > greeting.txt")
    assert finish(env)[1] == 1.0
    env.reset(seed=0, options={"task_id": "flag_002"})
    bash(env, "touch ok.flag")
    assert finish(env)[1] == 1.0
    env.close()


@pytest.fixture
def pinchbench(tmp_path, clawgym_world):
    root = tmp_path / "pinchbench"
    write(root / "assets" / "todo.txt", "buy milk\ncall mom\n")
    write(
        root / "tasks" / "task_01_count.md",
        """
        ---
        id: task_01_count
        name: Count todo items
        category: files
        grading_type: automated
        timeout_seconds: 120
        workspace_files:
          - source: assets/todo.txt
            dest: todo.txt
        ---

        ## Prompt

        Count the items in todo.txt and write the number to count.txt.

        ## Expected Behavior

        The agent reads the file and writes 2.

        ## Grading Criteria

        - [ ] count.txt holds 2

        ## Automated Checks

        ```python
        import os

        def grade(transcript, workspace_path):
            path = os.path.join(workspace_path, "count.txt")
            correct = os.path.exists(path) and open(path).read().strip() == "2"
            used_tools = any(part.get("type") == "toolCall"
                             for event in transcript for part in event["message"].get("content", [])
                             if event["message"]["role"] == "assistant" and isinstance(part, dict))
            return {"file_correct": 1.0 if correct else 0.0, "used_tools": 1.0 if used_tools else 0.0}
        ```
        """,
    )
    write(
        root / "tasks" / "task_02_poem.md",
        """
        ---
        id: task_02_poem
        name: Write a poem
        category: writing
        grading_type: llm_judge
        timeout_seconds: 60
        workspace_files: []
        ---

        ## Prompt

        Write a two-line poem about the sea in poem.txt.

        ## Grading Criteria

        - [ ] Two lines about the sea
        """,
    )
    write(
        root / "tasks" / "task_03_hybrid.md",
        """
        ---
        id: task_03_hybrid
        name: Hybrid
        grading_type: hybrid
        ---

        ## Prompt

        Create done.txt.

        ## Grading Criteria

        - [ ] done.txt exists

        ## Automated Checks

        ```python
        import os
        def grade(transcript, workspace_path):
            return {"exists": float(os.path.exists(os.path.join(workspace_path, "done.txt")))}
        ```
        """,
    )
    write(root / "tasks" / "task_04_broken.md", "no front matter here\n")
    write(root / "tasks" / "TASK_TEMPLATE.md", "---\nid: task_XX\n---\n## Prompt\nx\n")
    return root


def test_pinchbench_suite(pinchbench, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    suite = validate_suite(f"pinchbench:{pinchbench}")
    assert [t.id for t in suite.tasks] == ["task_01_count", "task_02_poem", "task_03_hybrid"]
    assert suite.errors == ["task task_04_broken: no YAML front matter between --- lines"]
    env = HarnessEnv(tasks=suite.tasks)
    env.reset(seed=0, options={"task_id": "task_01_count"})
    assert bash(env, "cat todo.txt")[0]["messages"][-1]["content"] == "buy milk\ncall mom\n"
    bash(env, "wc -l < todo.txt > count.txt")
    _, reward, _, _, info = finish(env)
    assert reward == 1.0 and info["reward_breakdown"] == {"file_correct": 1.0, "used_tools": 1.0}
    env.reset(seed=0, options={"task_id": "task_02_poem"})
    _, reward, _, _, info = finish(env)
    assert (
        reward == 0.0 and "needs" not in (info["grader_error"] or "") and "none is configured" in info["grader_error"]
    )
    assert info["reward_breakdown"]["llm_judge"].startswith("skipped")
    env.close()


def test_pinchbench_hybrid_with_a_judge(pinchbench, tmp_path, monkeypatch, chat_server):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_GYM_JUDGE_URL", chat_server["url"])
    monkeypatch.setenv("HARNESS_GYM_JUDGE_MODEL", "judge")
    chat_server["replies"].append('{"score": 0.5, "rationale": "half done"}')
    env = HarnessEnv(tasks=f"pinchbench:{pinchbench}")
    env.reset(seed=0, options={"task_id": "task_03_hybrid"})
    bash(env, "touch done.txt")
    _, reward, _, _, info = finish(env)
    env.close()
    assert reward == 0.75 and info["reward_breakdown"]["exists"] == 1.0 and info["reward_breakdown"]["llm_judge"] == 0.5
    judged = chat_server["requests"][0]["body"]["messages"][1]["content"]
    assert "done.txt exists" in judged and "touch done.txt" in judged


@pytest.fixture
def pinchbench_published(tmp_path, clawgym_world):
    """PinchBench files exactly as the published repository writes them: ``source`` relative to
    ``assets/``, inline ``path`` + ``content`` files, ``grading_weights`` and a judge rubric."""
    root = tmp_path / "published"
    write(root / "assets" / "csvs" / "sales.csv", "region,amount\nnorth,3\nsouth,4\n")
    write(
        root / "tasks" / "task_sales_total.md",
        """
        ---
        id: task_sales_total
        name: Sales total
        category: csv_analysis
        grading_type: hybrid
        timeout_seconds: 120
        grading_weights:
          automated: 0.6
          llm_judge: 0.4
        workspace_files:
          - source: csvs/sales.csv
            dest: data/sales.csv
          - path: "notes/readme.md"
            content: |
              Write the total of the amount column to total.txt.
        ---

        ## Prompt

        Read data/sales.csv and write the total amount to total.txt.

        ## Expected Behavior

        The agent sums the amount column.

        ## Grading Criteria

        - [ ] total.txt holds 7

        ## Automated Checks

        ```python
        import os

        def grade(transcript, workspace_path):
            path = os.path.join(workspace_path, "total.txt")
            ok = os.path.exists(path) and open(path).read().strip() == "7"
            return {"total_correct": 1.0 if ok else 0.0, "note": "a comment, not a score", "checked": None}
        ```

        ## LLM Judge Rubric

        ### Criterion 1: Arithmetic shown (weight 1.0)
        The answer is exactly the sum of the column.
        """,
    )
    return root


def test_pinchbench_published_files_weights_and_rubric(pinchbench_published, tmp_path, monkeypatch, chat_server):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_GYM_JUDGE_URL", chat_server["url"])
    monkeypatch.setenv("HARNESS_GYM_JUDGE_MODEL", "judge")
    suite = validate_suite(f"pinchbench:{pinchbench_published}")
    assert suite.errors == [] and [t.id for t in suite.tasks] == ["task_sales_total"]
    env = HarnessEnv(tasks=suite.tasks)
    env.reset(seed=0)
    listing = bash(env, "cat data/sales.csv notes/readme.md")[0]["messages"][-1]["content"]
    assert "south,4" in listing and "Write the total" in listing
    bash(env, "echo 7 > total.txt")
    chat_server["replies"].append('{"score": 0.5, "rationale": "fine"}')
    _, reward, _, _, info = finish(env)
    env.close()
    # 0.6 * 1.0 (automated; non-numeric values skipped as PinchBench skips them) + 0.4 * 0.5 (judge)
    assert reward == pytest.approx(0.8)
    assert info["reward_breakdown"]["total_correct"] == 1.0
    assert info["reward_breakdown"]["skipped_non_numeric"] == "checked, note"
    judged = chat_server["requests"][0]["body"]["messages"][1]["content"]
    assert "Arithmetic shown" in judged and "sums the amount column" in judged


@pytest.mark.parametrize(
    "entry, message",
    [
        ("- source: /etc/passwd\n    dest: passwd", "must be a relative path"),
        ("- source: ../../../etc/hostname\n    dest: h", "must be a relative path"),
        ("- path: ../escape.txt\n    content: x", "must be a relative path"),
        ("- path: /tmp/abs.txt\n    content: x", "must be a relative path"),
        ("- source: link/hostname\n    dest: h", "leads outside"),
        ("- source: missing.txt\n    dest: m", "not found under"),
        ("- {}", "neither 'content' nor a 'source'"),
    ],
)
def test_pinchbench_refuses_files_from_outside_the_suite(tmp_path, monkeypatch, entry, message, clawgym_world):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "bench"
    (root / "assets").mkdir(parents=True)
    (root / "assets" / "link").symlink_to("/etc")
    task = f"---\nid: task_bad\ngrading_type: llm_judge\nworkspace_files:\n  {entry}\n---\n\n## Prompt\n\nx\n"
    write(root / "tasks" / "task_bad.md", task)
    suite = validate_suite(f"pinchbench:{root}")
    assert suite.tasks == [] and len(suite.errors) == 1
    assert suite.errors[0].startswith("task task_bad: workspace_files[0]") and message in suite.errors[0]


def test_pinchbench_refuses_bad_grading_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "bench"
    checks = "## Automated Checks\n\n```python\ndef grade(t, w):\n    return {'a': 1.0}\n```\n"
    for name, weights in (("neg", "{automated: -1, llm_judge: 1}"), ("zero", "{automated: 0, llm_judge: 0}")):
        head = f"---\nid: task_{name}\ngrading_type: hybrid\ngrading_weights: {weights}\n---\n\n"
        write(root / "tasks" / f"task_{name}.md", head + "## Prompt\n\nx\n\n" + checks)
    errors = validate_suite(f"pinchbench:{root}").errors
    assert any("task_neg: grading_weights.automated must be a non-negative number" in e for e in errors)
    assert any("task_zero: grading_weights must not both be zero" in e for e in errors)


TOOL_NAME_GRADER = """
---
id: task_tool_names
grading_type: automated
---

## Prompt

Create done.txt with a shell command.

## Automated Checks

```python
import os

def grade(transcript, workspace_path):
    calls, results = {}, {}
    for event in transcript:
        message = event["message"]
        for part in message.get("content", []):
            if message["role"] == "assistant" and part.get("type") == "toolCall":
                calls[part["id"]] = part["name"]
        if message["role"] == "toolResult":
            results[message["toolCallId"]] = message["toolName"]
    used_bash = any(name == "execute_bash" for name in calls.values())
    paired = bool(calls) and calls == results
    exists = os.path.exists(os.path.join(workspace_path, "done.txt"))
    return {"used_bash": float(used_bash), "paired": float(paired), "exists": float(exists)}
```
"""


@pytest.mark.parametrize("tool_level", [0, 1, 2])
def test_graders_see_canonical_tool_names_under_every_tool_interface(tool_level, tmp_path, monkeypatch, clawgym_world):
    """One behaviour, one grader that inspects tool names and call/result pairing: the same reward
    under T0 (canonical names), T1 (aliases, resampled) and T2 (opaque identifiers)."""
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    write(tmp_path / "pb" / "tasks" / "task_tool_names.md", TOOL_NAME_GRADER)
    env = HarnessEnv(f"S0T{tool_level}O0C0W0", tasks=f"pinchbench:{tmp_path / 'pb'}", resample_names=True)
    env.reset(seed=3)
    names = env.tool_interface
    shell, finisher = names.name_for("execute_bash"), names.name_for("finish")
    assert (shell == "execute_bash") == (tool_level == 0)
    call = {"name": shell, "arguments": {"command": "touch done.txt"}}
    env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    _, reward, terminated, _, info = env.step(
        f"<tool_call>{json.dumps({'name': finisher, 'arguments': {'message': 'done'}})}</tool_call>"
    )
    env.close()
    assert terminated and info["grader_error"] is None
    assert info["reward_breakdown"] == {"used_bash": 1.0, "paired": 1.0, "exists": 1.0} and reward == 1.0


@pytest.fixture
def clawgym_pytest_task(tmp_path, clawgym_world):
    """A ClawGym folder whose grader does what published ones do: `python` (not python3) and
    `python -m pytest` on tests kept under reward/, where the agent never sees them."""
    task = tmp_path / "clawgym-pytest" / "task_0100"
    write(
        task / "data_entry.json",
        json.dumps(
            {
                "task_id": "task_0100",
                "user_query": "Write slug.py with slugify(text): lowercase, words joined by '-'.",
                "input_mount_dir": WS,
                "metadata": {"category": "code", "grading_type": "automated"},
            }
        ),
    )
    write(
        task / "reward" / "test_slug.py",
        f"""
        import sys
        sys.path.insert(0, "{WS}")
        from slug import slugify

        def test_words():
            assert slugify("Hello Big World") == "hello-big-world"

        def test_spaces():
            assert slugify("  a   b ") == "a-b"
        """,
    )
    write(
        task / "reward" / "reward.sh",
        """
        cd reward
        if python -m pytest -q -p no:cacheprovider test_slug.py > /dev/null 2>&1; then echo 1.0; else echo 0.0; fi
        """,
    )
    return task.parent


@pytest.mark.parametrize("config", ["S0T0O0C0W0", "S2T1O2C1W0", "S1T2O1C2W0"])
def test_clawgym_graders_run_python_and_pytest_in_their_world(clawgym_pytest_task, config):
    env = HarnessEnv(config, tasks=f"clawgym:{clawgym_pytest_task}")
    names = None
    for solve, expected in ((True, 1.0), (False, 0.0)):
        env.reset(seed=0)
        names = env.tool_interface
        if solve:
            code = "cat > slug.py <<'PY'\ndef slugify(text):\n    return '-'.join(text.lower().split())\nPY"
            call = {"name": names.name_for("execute_bash"), "arguments": {"command": code}}
            env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        finisher = {"name": names.name_for("finish"), "arguments": {"message": "done"}}
        _, reward, terminated, _, info = env.step(f"<tool_call>{json.dumps(finisher)}</tool_call>")
        assert terminated and info["grader_error"] is None, env.last_grade.log
        assert reward == expected, env.last_grade.log
    env.close()


def test_a_task_whose_grader_calls_an_interpreter_the_world_lacks_is_refused_by_name(tmp_path, clawgym_world):
    from harness_gym.worlds import WorldError

    task = tmp_path / "suite" / "task_0199"
    write(task / "data_entry.json", json.dumps({"task_id": "task_0199", "user_query": "Fix the Ruby script."}))
    write(task / "input_files" / "app.rb", "puts 1\n")
    write(task / "reward" / "check.rb", "puts 1.0\n")
    write(task / "reward" / "reward.sh", "#!/bin/bash\nset -e\ncd reward && ruby check.rb\n", 0o755)
    with pytest.raises(WorldError, match=r"task task_0199: its grader calls ruby, which world 'clawgym' does not"):
        HarnessEnv(tasks=f"clawgym:{tmp_path / 'suite'}")
