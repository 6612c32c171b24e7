import copy

import pytest

from harness_gym.factors import compile_config
from harness_gym.space import FACTORS, HarnessConfig, all_configs
from harness_gym.spec import SpecError, load_spec, save_spec, spec_hash, validate_spec

# which top-level spec keys each factor owns
OWNED = {
    "S": {"system_prompt"},
    "T": {"tools", "tool_naming"},
    "O": {"observation"},
    "C": {"context"},
    "W": {"workflow"},
}


def test_every_configuration_compiles_to_a_valid_spec_with_a_distinct_hash():
    hashes = set()
    for config in all_configs():
        spec = compile_config(config)
        validate_spec(spec)
        assert spec["config"] == config.code and spec["name"] == config.env_id
        hashes.add(spec_hash(spec))
    assert len(hashes) == 243


def test_a_variant_changes_only_its_own_component():
    for config in all_configs()[::7]:
        base = compile_config(config)
        for factor in FACTORS:
            for level in range(3):
                other = config.replace_level(factor, level)
                if other == config:
                    continue
                changed = {k for k in base if k not in ("name", "config") and base[k] != compile_config(other)[k]}
                assert changed and changed <= OWNED[factor], (config, factor, level, changed)


def test_functional_tools_keep_their_parameters_at_every_t_level():
    params = {}
    for level in range(3):
        spec = compile_config(HarnessConfig(0, level, 0, 0, 0))
        functional = {t["canonical"]: t["parameters"] for t in spec["tools"] if t["implementation"] != "unavailable"}
        assert set(functional) == {"execute_bash", "file_editor", "finish"}
        params[level] = functional
    assert params[0] == params[1] == params[2]


def test_hash_is_stable_and_content_based():
    spec = compile_config("S0T0O0C0W0")
    assert spec_hash(spec) == spec_hash(copy.deepcopy(spec))
    spec["budget"]["max_steps"] = 31
    assert spec_hash(spec) != spec_hash(compile_config("S0T0O0C0W0"))


def test_invalid_spec_error_names_the_json_path():
    spec = compile_config("S0T0O0C0W0")
    spec["tools"][1]["parameters"] = {"type": "array"}
    spec["context"] = {"strategy": "summary"}
    with pytest.raises(SpecError) as info:
        validate_spec(spec)
    message = str(info.value)
    assert "$.tools[1].parameters.type" in message
    assert "$.context" in message and "keep_last_turns" in message


def test_spec_without_exactly_one_finish_tool_is_rejected():
    spec = compile_config("S0T0O0C0W0")
    spec["tools"] = [t for t in spec["tools"] if t["implementation"] != "finish"]
    with pytest.raises(SpecError, match=r"\$\.tools"):
        validate_spec(spec)


def test_save_and_load_round_trip(tmp_path):
    spec = compile_config("S2T1O2C2W1")
    for name in ("h.yaml", "h.json"):
        save_spec(spec, tmp_path / name)
        assert load_spec(tmp_path / name) == spec
    (tmp_path / "bad.yaml").write_text("- not a mapping\n")
    with pytest.raises(SpecError, match="mapping"):
        load_spec(tmp_path / "bad.yaml")
