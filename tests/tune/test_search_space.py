"""Search-space YAML: shipped defaults load, user files override keys, bad files give clear errors."""

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.tune.search_space import default_search_file, load_search_space, parse_search_space


def test_shipped_spaces_load() -> None:
    meg = load_search_space(None, "megatron")
    ds = load_search_space(None, "deepspeed")
    assert meg.tensor_parallel is None and meg.micro_batch_size is None  # auto
    assert set(meg.recompute) == {"none", "selective", "full", "block"} and meg.memory_margin == pytest.approx(0.05)
    assert ds.tensor_parallel == (1,) and ds.zero_stage == (0, 1, 2, 3)
    assert default_search_file("hf-deepspeed").name == "deepspeed.yaml"
    assert default_search_file("megatron-deepspeed").name == "megatron.yaml"


def test_user_file_overrides_default(tmp_path: Path) -> None:
    f = tmp_path / "narrow.yaml"
    f.write_text("micro_batch_size: [1, 2]\npipeline_parallel: 4\nrecompute: [full]\nmemory_margin: 0.1\n")
    space = load_search_space(f, "megatron")
    assert space.micro_batch_size == (1, 2) and space.pipeline_parallel == (4,)
    assert space.recompute == ("full",) and space.memory_margin == pytest.approx(0.1)
    assert space.virtual_pipeline is None  # untouched keys keep the shipped default
    assert space.source == str(f)


@pytest.mark.parametrize("raw, words", [
    ({"micro_batch_sizes": [1]}, ["unknown key", "micro_batch_sizes"]),
    ({"micro_batch_size": ["two"]}, ["not an integer"]),
    ({"micro_batch_size": []}, ["empty list"]),
    ({"recompute": ["sometimes"]}, ["recompute mode", "sometimes"]),
    ({"zero_stage": [4]}, ["0-3"]),
    ({"tensor_parallel": [0]}, [">= 1"]),
    ({"memory_margin": 1.5}, ["memory_margin"]),
])
def test_bad_space_is_a_usage_error(raw: dict, words: list[str]) -> None:
    with pytest.raises(UsageError) as err:
        parse_search_space(raw, "my.yaml")
    for w in words:
        assert w in str(err.value)
    assert "my.yaml" in str(err.value)


def test_missing_or_malformed_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        load_search_space(tmp_path / "nope.yaml", "megatron")
    with pytest.raises(UsageError, match="a folder, not a file"):
        load_search_space(tmp_path, "megatron")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(UsageError, match="mapping"):
        load_search_space(bad, "megatron")


def test_yaml_merge_keys_read_as_safe_load_reads_them(tmp_path: Path) -> None:
    """The duplicate-key check (99feaff) must not refuse YAML's `<<` merge key (it ran the merge tag through the
    constructor: 'could not determine a constructor'), nor count a merged key that the file then gives as a duplicate
    (the given key wins, as in yaml.safe_load)."""
    f = tmp_path / "merged.yaml"
    f.write_text("<<: {micro_batch_size: [1, 2], recompute: [full]}\nrecompute: [none]\n")
    space = load_search_space(f, "megatron")
    assert space.micro_batch_size == (1, 2) and space.recompute == ("none",)
