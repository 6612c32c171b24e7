import pytest

from harness_gym.space import BASE_CONFIG, HarnessConfig, all_configs, hamming, neighbours


def test_parse_and_print_round_trip():
    config = HarnessConfig.parse("S1T2O0C1W2")
    assert config == HarnessConfig(1, 2, 0, 1, 2)
    assert config.code == "S1T2O0C1W2"
    assert config.env_id == "Harness-S1T2O0C1W2"
    assert config.digits == "12012"
    assert HarnessConfig.parse("Harness-S1T2O0C1W2") == config
    assert HarnessConfig.parse("12012") == config
    assert HarnessConfig.parse([1, 2, 0, 1, 2]) == config
    assert str(config) == "S1T2O0C1W2"
    assert config.level("t") == 2
    assert config.replace_level("T", 0) == HarnessConfig(1, 0, 0, 1, 2)


@pytest.mark.parametrize("bad", ["S3T0O0C0W0", "S1T2O0C1", "Harness-s1t2o0c1w2", "1201", "S1 T2 O0 C1 W2", ""])
def test_malformed_id_says_the_expected_form(bad):
    with pytest.raises(ValueError, match=r"expected the form 'S<s>T<t>O<o>C<c>W<w>'"):
        HarnessConfig.parse(bad)


def test_bad_level_sequence():
    with pytest.raises(ValueError, match="5 levels"):
        HarnessConfig.parse([0, 1, 3, 0, 0])


def test_all_243_distinct_and_hashable():
    configs = all_configs()
    assert len(configs) == 243
    assert len(set(configs)) == 243
    assert len({c.env_id for c in configs}) == 243
    assert configs[0] == BASE_CONFIG


def test_hamming_and_neighbours():
    assert hamming("S0T0O0C0W0", "S1T0O0C0W2") == 2
    assert hamming(BASE_CONFIG, BASE_CONFIG) == 0
    for config in all_configs()[::17]:
        near = neighbours(config)
        assert len(near) == 10
        assert all(hamming(config, n) == 1 for n in near)
    assert len(neighbours(BASE_CONFIG, distance=5)) == 2**5
