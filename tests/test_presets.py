import gymnasium as gym
import pytest
from conftest import requires_bwrap
from gymnasium.utils.env_checker import check_env

from harness_gym import load_tasks
from harness_gym.agents import NullAgent, ReferenceAgent, run_episode
from harness_gym.presets import PRESETS, load_preset, preset_path
from harness_gym.spec import SpecError, compose, diff_specs, load_spec, save_spec, strip_skills

FUNCTIONAL = {"HarnessAdapt-H0": (1, 0), "HarnessAdapt-H1": (7, 4), "HarnessAdapt-H2": (8, 5)}


@pytest.mark.parametrize("env_id, counts", FUNCTIONAL.items())
def test_harnessadapt_presets_have_the_papers_sizes(env_id, counts):
    spec = load_preset(env_id)
    tools = [t for t in spec["tools"] if t["implementation"] != "finish"]
    assert (len(tools), len(spec["hooks"])) == counts


def test_out_of_space_presets_imitate_their_conventions():
    claude = {t["name"] for t in load_preset("Harness-ClaudeCodeStyle")["tools"]}
    assert claude == {"Bash", "Read", "Edit", "Write", "Glob", "Grep", "TodoWrite"}
    edit = next(t for t in load_preset("Harness-ClaudeCodeStyle")["tools"] if t["name"] == "Edit")
    assert set(edit["parameters"]["properties"]) == {"file_path", "old_string", "new_string", "replace_all"}
    openclaw = load_preset("Harness-OpenClawStyle")
    assert {t["name"] for t in openclaw["tools"]} == {"read", "write", "edit", "apply_patch", "exec", "process"}
    assert {h["name"] for h in openclaw["hooks"]} >= {"loop_warning", "loop_critical", "loop_breaker"}


def solve_on_preset(env_id: str, tasks: list[str]) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped)
    for task_id in tasks:
        result = run_episode(env, ReferenceAgent(), seed=0, task_id=task_id)
        assert result.reward == 1.0, (env_id, task_id, result.final_info.get("reward_breakdown"))
    assert run_episode(env, NullAgent(), seed=0).reward == 0.0
    env.close()


TASKS = [t.id for t in load_tasks("builtin")]


@requires_bwrap
@pytest.mark.parametrize("env_id", sorted(PRESETS))
def test_presets_are_environments_that_the_reference_agent_solves(env_id):
    """Each preset on every fifth built-in task (both families): the presets between them take every
    task once (~4 s a preset instead of ~17 s); every task on every preset runs behind ``slow``."""
    solve_on_preset(env_id, TASKS[sorted(PRESETS).index(env_id) :: len(PRESETS)])


@requires_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("env_id", sorted(PRESETS))
def test_presets_solve_every_builtin_task(env_id):
    solve_on_preset(env_id, TASKS)


@requires_bwrap
def test_any_spec_file_is_an_environment(tmp_path):
    path = tmp_path / "h.yaml"
    path.write_text(
        "extends: harnessadapt_h0\nname: My-Harness\ntools:\n  - {use: bash}\n  - {use: search}\n  - {use: submit}\n"
    )
    env = gym.make("HarnessAdapt", spec=str(path))
    obs, info = env.reset(seed=0)
    assert info["spec_name"] == "My-Harness" and {t["function"]["name"] for t in obs["tools"]} == {
        "bash",
        "search",
        "submit",
    }
    env.close()
    with pytest.raises(ValueError, match="needs a harness spec"):
        gym.make("HarnessAdapt")


def test_spec_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: harnessadapt_h0\ntools:\n  - {use: teleport}\n")
    with pytest.raises(SpecError, match=r"\$\.tools\[0\]: the library has no tool 'teleport'"):
        load_spec(bad)
    bad.write_text("extends: harnessadapt_h0\nhooks:\n  - {name: x, event: sometimes, message: hi}\n")
    with pytest.raises(SpecError, match=r"\$\.hooks\[0\]"):
        load_spec(bad)
    bad.write_text("extends: nowhere\n")
    with pytest.raises(SpecError, match="no spec file or preset named 'nowhere'"):
        load_spec(bad)


def test_compose_diff_save_load(tmp_path):
    h1, h2 = load_preset("HarnessAdapt-H1"), load_preset("HarnessAdapt-H2")
    changes = diff_specs(h1, h2)
    assert "+ tool search" in changes and "+ hook ping_pong_alarm" in changes
    assert any(line.startswith("~ $.name") for line in changes)
    composed = compose(h1, {"budget": {"max_steps": 10}, "skills": ["A skill."]})
    assert composed["budget"] == {**h1["budget"], "max_steps": 10} and composed["tools"] == h1["tools"]
    assert strip_skills(composed)["skills"] == []
    save_spec(composed, tmp_path / "c.json")
    assert load_spec(tmp_path / "c.json") == composed
    assert preset_path("harnessadapt_h1") == preset_path("HarnessAdapt-H1")
