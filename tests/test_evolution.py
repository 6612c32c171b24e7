"""The evolution machinery: proposals, validation in the real sandbox, paired comparison,
acceptance and the audit log, with a harness-sensitive scripted policy."""

import json

import pytest
from conftest import requires_bwrap

from harness_gym import load_tasks
from harness_gym.agents import NullAgent, ReferenceAgent
from harness_gym.evolution import (
    AuditLog,
    ProposalError,
    ScriptedProposer,
    TeacherProposer,
    apply_changes,
    compare,
    evolve,
    extract_json,
    validate_candidate,
)
from harness_gym.hooks import register_hook_plugin
from harness_gym.llm_client import ChatClient
from harness_gym.presets import load_preset

TASKS = [
    t
    for t in load_tasks("builtin")
    if t.id in ("repair-word-frequency", "workspace-config-update", "workspace-organize-logs")
]


class HarnessSensitivePolicy:
    """Solves a task with probability 0.5 when the harness offers `search`, else 0.25; the draw
    comes from the environment's seeded generator, so paired rollouts are comparable."""

    def reset(self, env):
        inner = env.unwrapped
        tools = {t.canonical for t in inner.tool_interface.tools.values()}
        chance = 0.5 if "search" in tools else 0.25
        self.agent = ReferenceAgent() if inner.np_random.random() < chance else NullAgent()
        self.agent.reset(env)

    def act(self, observation):
        return self.agent.act(observation)


def test_apply_changes():
    h0 = load_preset("HarnessAdapt-H0")
    candidate = apply_changes(h0, {"add_tools": ["search"], "add_hooks": ["budget_reminder"]})
    assert [t["name"] for t in candidate["tools"]] == ["bash", "search", "submit"]
    assert [h["name"] for h in candidate["hooks"]] == ["budget_reminder"]
    back = apply_changes(candidate, {"remove_tools": ["search"], "remove_hooks": ["budget_reminder"]})
    assert back["tools"] == h0["tools"] and back["hooks"] == []
    with pytest.raises(ProposalError, match="library has no tool"):
        apply_changes(h0, {"add_tools": ["teleport"]})
    with pytest.raises(ProposalError, match="may not replace"):
        apply_changes(h0, {"set": {"tools": []}})


@requires_bwrap
def test_validation_smoke_tests_new_tools_and_hooks():
    h0 = load_preset("HarnessAdapt-H0")
    h2 = load_preset("HarnessAdapt-H2")
    report = validate_candidate(h2, h0)
    assert report.ok, report.problems
    assert set(report.checked_tools) == {
        "read_file",
        "edit_file",
        "search",
        "view_diff",
        "restore_file",
        "run_check",
        "delivery_evidence",
    }
    assert set(report.checked_hooks) == {h["name"] for h in h2["hooks"]}
    openclaw = load_preset("Harness-OpenClawStyle")
    assert validate_candidate(openclaw).ok


@requires_bwrap
def test_validation_rejects_broken_candidates():
    h0 = load_preset("HarnessAdapt-H0")
    register_hook_plugin("never", lambda spec: lambda state, call: None)
    broken = apply_changes(
        h0,
        {
            "add_tools": [
                {
                    "name": "crasher",
                    "description": "Crashes.",
                    "parameters": {"type": "object", "properties": {}},
                    "implementation": {"python": "raise RuntimeError('boom')"},
                },
                {
                    "name": "untested",
                    "description": "Needs an argument.",
                    "implementation": {"command": "echo {x}"},
                    "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
                },
            ],
            "add_hooks": [{"name": "silent", "event": "step", "plugin": "never"}],
        },
    )
    report = validate_candidate(broken, h0)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "tool crasher: crashed" in text and "tool untested: has required parameters but no 'example'" in text
    assert "hook silent: did not fire" in text
    invalid = dict(h0, budget={"max_steps": 0})
    assert "max_steps" in validate_candidate(invalid).problems[0]


@requires_bwrap
def test_paired_comparison_uses_the_same_tasks_and_seeds():
    h0, h2 = load_preset("HarnessAdapt-H0"), load_preset("HarnessAdapt-H2")
    before, after = compare(h0, h2, HarnessSensitivePolicy, TASKS, rollouts_per_task=2, seed=3)
    assert [r.task_id for r in before.results] == [r.task_id for r in after.results]
    assert len(before.results) == 6 and before.spec_hash != after.spec_hash
    assert {r.spec_hash for r in after.results} == {after.spec_hash}


@requires_bwrap
def test_evolve_accepts_rejects_and_audits(tmp_path):
    h0 = load_preset("HarnessAdapt-H0")
    proposer = ScriptedProposer(
        [
            {"add_tools": ["search"]},  # lifts the policy's success: both rates should rise
            {"remove_tools": ["bash"]},  # the policy's solutions need a shell: pass rate falls
        ]
    )
    log = AuditLog(tmp_path / "audit.jsonl")
    result = evolve(
        h0,
        proposer,
        HarnessSensitivePolicy,
        TASKS,
        rounds=3,
        rollouts_per_task=4,
        prep_rollouts_per_task=1,
        audit_log=log,
        seed=11,
    )
    entries = log.entries()
    assert [e["decision"] for e in entries] == ["accepted", "rejected", "rejected"]
    first, second, third = entries
    assert first["diff"] == ["+ tool search"] and first["validation"]["ok"]
    assert first["rates"]["candidate"]["pass_rate"] > first["rates"]["current"]["pass_rate"]
    assert first["rates"]["candidate"]["trainable_rate"] >= first["rates"]["current"]["trainable_rate"]
    assert "dropped" in second["reason"] and second["diff"] == ["- tool bash"]
    assert "proposal failed" in third["reason"]
    assert result.accepted_rounds == [1] and "search" in {t["name"] for t in result.spec["tools"]}
    evolve(
        result.spec,
        ScriptedProposer([]),
        HarnessSensitivePolicy,
        TASKS[:1],
        rounds=1,
        prep_rollouts_per_task=1,
        audit_log=log,
    )
    assert len(log.entries()) == 4  # appended, never rewritten


def test_teacher_proposer_over_an_openai_endpoint(chat_server):
    h0 = load_preset("HarnessAdapt-H0")
    chat_server["replies"] += [
        "Here is my proposal:\n```json\n"
        + json.dumps(
            {
                "diagnosis": "The agent loops.",
                "design": "Warn on repeats.",
                "changes": {"add_hooks": ["repetition_alarm"]},
            }
        )
        + "\n```",
        "I think you should add more tools.",
    ]
    teacher = TeacherProposer(ChatClient(chat_server["url"], "teacher", retries=0))
    proposal = teacher.propose(h0, [])
    assert [h["name"] for h in proposal.spec["hooks"]] == ["repetition_alarm"]
    assert "The agent loops." in proposal.rationale
    prompt = chat_server["requests"][0]["body"]["messages"]
    assert "repetition_alarm" in prompt[0]["content"] and '"bash"' in prompt[1]["content"]
    with pytest.raises(ProposalError, match="no JSON object"):
        teacher.propose(h0, [])
    with pytest.raises(ProposalError, match="invalid"):
        extract_json("{not: json}")
